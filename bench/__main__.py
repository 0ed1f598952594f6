"""`python -m bench [name ...]`: run the benchmarks (all by default), print a table, write JSON.

Figures only, no pass/fail: compare them with DESIGN.md's "Cost shape to keep" by eye or across commits
(bench/results/latest.json; a run of only some benchmarks writes partial.json). A benchmark that
crashes is reported and makes the exit status 1.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import platform
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import Section, close_local

# In this order: cold_imports before any stack exists; loop_overhead first on the stack, so its first
# run is the cold one; streaming last, as it points litellm at a fake server for a while; package_sizes
# reads (or builds) the Lambda zips in dist/ and touches no stack; tokens replays prompts offline (no stack);
# console_weight reads the console's files from the package (no stack).
# soak last: it fails the stack's seams on purpose (faults are taken out again before it returns).
BENCHMARKS = [
    "cold_imports",
    "loop_overhead",
    "transitions",
    "approvals",
    "dynamodb_ops",
    "memory_search",
    "canonical",
    "evals",
    "spend",
    "delegation",
    "eval_suites",
    "workflows",
    "following",
    "door_a2a",
    "door_mcp",
    "door_agui",
    "door_responses",
    "webhooks",
    "triggers",
    "circuits",
    "streaming",
    "attachments",
    "package_sizes",
    "tokens",
    "console_weight",
    "first_token",
    "soak",
]
RESULTS = Path(__file__).resolve().parent / "results"
NAME_WIDTH = 64


def main(argv: list[str]) -> int:
    unknown = [a for a in argv if a not in BENCHMARKS]
    if unknown:
        print(
            f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}", file=sys.stderr
        )
        return 2
    selected = [b for b in BENCHMARKS if b in argv] or BENCHMARKS
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from stepwise.store import wiring

    wiring.install()  # an entry point like a handler module (the local stack installs the same)

    began = time.perf_counter()
    sections: dict[str, Section] = {}
    errors: dict[str, str] = {}
    try:
        for name in selected:
            print(f"running {name} …", file=sys.stderr, flush=True)
            started = time.perf_counter()
            try:
                section: Section = importlib.import_module(f"bench.{name}").run()
            except Exception:  # noqa: BLE001 - one broken benchmark must not hide the others' figures
                errors[name] = traceback.format_exc()
                print(errors[name], file=sys.stderr)
                continue
            section.seconds = time.perf_counter() - started
            sections[name] = section
    finally:
        close_local()
    total = time.perf_counter() - began

    print(_table(sections, errors, total))
    # latest.json is always a whole suite; a partial run must not overwrite it with a subset.
    out = RESULTS / ("latest.json" if selected == BENCHMARKS else "partial.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(_summary(sections, errors, total), indent=2, default=str) + "\n")
    print(f"\nwritten to {out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out}")
    return 1 if errors else 0


def _table(sections: dict[str, Section], errors: dict[str, str], total: float) -> str:
    lines = []
    for name, section in sections.items():
        lines += ["", f"== {section.title}  [{name}, {section.seconds:.1f} s]"]
        for f in section.figures:
            label = f.name if len(f.name) <= NAME_WIDTH else f.name[: NAME_WIDTH - 1] + "…"
            lines.append(f"  {label:<{NAME_WIDTH}} {f.shown():>12} {f.unit:<12} {f.note}".rstrip())
        lines += [f"     · {n}" for n in section.notes]
    for name, error in errors.items():
        lines += ["", f"== {name}: FAILED", f"     {error.strip().splitlines()[-1]}"]
    lines += ["", f"total {total:.1f} s on {os.cpu_count()} CPUs, Python {platform.python_version()}"]
    return "\n".join(lines)


def _summary(sections: dict[str, Section], errors: dict[str, str], total: float) -> dict[str, Any]:
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "total_seconds": round(total, 1),
        "benchmarks": {
            name: {
                "title": s.title,
                "seconds": round(s.seconds, 1),
                "figures": [
                    {"name": f.name, "value": f.value, "unit": f.unit, "note": f.note} for f in s.figures
                ],
                "notes": s.notes,
                "details": s.details,
            }
            for name, s in sections.items()
        },
        "errors": errors,
    }


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return done.stdout.strip() or None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

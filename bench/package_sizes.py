"""Deployment package sizes: each layer and function zipped and unzipped, and each function with its
layers against Lambda's 250 MiB unzipped limit, measured from the artifacts `make package` builds.

Reads dist/ when a build is there and is not older than the sources it was built from; otherwise runs
packaging/build.py first (a minute or so: cross-installing the layers from pip's cache, zipping).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.harness import Section

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
# What a build depends on; newer than the build means the artifacts may be stale.
SOURCES = ["template.yaml", "requirements/main.lock", "layers", "shared/stepwise", "functions", "packaging"]
MIB = 1024 * 1024


def _sizes() -> ModuleType:
    # packaging/ is a folder of scripts, not a package (it would shadow the `packaging` library).
    spec = importlib.util.spec_from_file_location("stepwise_packaging_sizes", ROOT / "packaging" / "sizes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _newest_source() -> float:
    newest = 0.0
    for name in SOURCES:
        path = ROOT / name
        files = (
            [path]
            if path.is_file()
            else [p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        )
        newest = max([newest, *(p.stat().st_mtime for p in files)])
    return newest


def _ensure_built(manifest: Path) -> str:
    if manifest.exists() and manifest.stat().st_mtime >= _newest_source():
        return "read from the last `make package`"
    subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "build.py")], check=True, stdout=subprocess.DEVNULL
    )
    return "built for this run (packaging/build.py)"


def run() -> Section:
    sizes = _sizes()
    origin = _ensure_built(DIST / sizes.MANIFEST)
    report = sizes.report(DIST)
    section = Section("Deployment package sizes (python3.12 arm64 zips in dist/)")
    for name, layer in report.layers.items():
        section.add(
            f"layer {name}",
            layer.unzipped / MIB,
            "MiB",
            f"zipped {layer.zipped / MIB:.1f} MiB, {layer.files:,} files",
        )
    for name, code in report.functions.items():
        section.add(
            f"function {name} (own code)",
            code.unzipped / 1024,
            "KiB",
            f"zipped {code.zipped / 1024:.1f} KiB, {code.files:,} files",
        )
    for name, total in sorted(report.totals.items(), key=lambda item: -item[1].unzipped):
        section.add(
            f"{name} + layers (limit {sizes.LIMIT / MIB:.0f})",
            total.unzipped / MIB,
            "MiB",
            f"{'fits' if total.fits else 'OVER'}, headroom {total.headroom / MIB:.1f} MiB; "
            f"zipped {total.zipped / MIB:.1f} MiB",
        )
    manifest = json.loads((DIST / sizes.MANIFEST).read_text())
    _bytecode(section, manifest.get("bytecode") or {})
    _left_out(section)
    section.notes.append(f"Artifacts {origin}; Lambda's limit is {sizes.LIMIT:,} bytes unzipped.")
    section.details = {**report.as_json(), "bytecode": manifest.get("bytecode")}
    return section


def _left_out(section: Section) -> None:
    """What the stepwise layer no longer carries: dev/ (the local stack and the CLI) sat in shared/, the
    layer's ContentUri, until they moved out; as sources they would weigh this much in every function."""
    files = [p for p in (ROOT / "dev").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    size = sum(p.stat().st_size for p in files)
    section.add(
        "left out of the stepwise layer: dev/ (stepwise_local, stepwise_cli)",
        size / 1024,
        "KiB",
        f"{len(files):,} files that run only on a developer's machine (sources, before any bytecode)",
    )


def _bytecode(section: Section, built: dict[str, Any]) -> None:
    """What packaging/bytecode.py compiled (it is part of the sizes above), and how much of litellm loads."""
    if built.get("python"):
        section.add(
            "bytecode shipped (3.12, unchecked-hash)",
            built["compiled_bytes"] / MIB,
            "MiB",
            f"{built['compiled_files']:,} modules the functions load, compiled by CPython {built['python']}; "
            f"{built.get('dropped_files', 0):,} more ({built.get('dropped_bytes', 0) / MIB:.1f} MiB) left "
            "out for headroom",
        )
    elif built:
        section.add("bytecode shipped", "none", note="no CPython 3.12 at build time: sources only")
    parts = built.get("litellm")
    if parts:
        section.add(
            "litellm modules the model step loads",
            parts["loaded_modules"],
            "modules",
            f"of {parts['packaged_modules']:,} shipped; {parts['loaded_bytes'] / MIB:.1f} of "
            f"{parts['packaged_bytes'] / MIB:.1f} MiB of source",
        )

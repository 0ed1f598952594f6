"""Imports as Lambda loads them, with and without bytecode, for bench/cold_imports.py.

The venv's own imports are warm: every module there has a `__pycache__` written by earlier runs, which
a Lambda sandbox only has if the package ships it. So this copies what the model step sees into a
temporary tree shaped like Lambda's (`task/` its code, `opt/python/` the core and model layers'
distributions, per their RECORD files, and the stepwise package), without any `__pycache__`, and imports
from it in fresh bare interpreters (`-I -S`: only that tree on sys.path, as Lambda has no site-packages):

- without bytecode: `-B`, so nothing is written and every import compiles from source, every time;
- with bytecode: the same tree after `compileall --invalidation-mode unchecked-hash` by this
  interpreter, of the modules `make package` shipped bytecode for (read from dist/stage: what the
  functions load, less what gave way to headroom), or of every module when there is no build.

Measured in each: a minimal Powertools Lambda (Logger, Metrics and a trivial handler: the floor any
Powertools function pays), the model step's handler module (no litellm: it loads on the first model
call), and litellm with the scripted provider (what that first call imports).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("core", "model")  # the model step's pinned layers (layers/<name>/requirements.txt)

MINIMAL_APP = """\
from aws_lambda_powertools import Logger, Metrics

logger = Logger(service="minimal")
metrics = Metrics(namespace="Bench", service="minimal")


@logger.inject_lambda_context
@metrics.log_metrics
def handler(event, context):
    return {"ok": True}
"""

_CHILD = """
import importlib, json, sys, time
sys.path[:0] = {paths!r}
began = time.perf_counter()
importlib.import_module({module!r})
out = {{"ms": (time.perf_counter() - began) * 1000, "litellm": "litellm" in sys.modules}}
out["otel_sdk"] = "opentelemetry.sdk" in sys.modules
began = time.perf_counter()
for name in {then!r}:
    importlib.import_module(name)
out["then_ms"] = (time.perf_counter() - began) * 1000
print(json.dumps(out))
"""


def _layer_dists() -> list[str]:
    names: list[str] = []
    for layer in LAYERS:
        text = (ROOT / "layers" / layer / "requirements.txt").read_text()
        names += [canonicalize_name(n) for n in re.findall(r"^([A-Za-z0-9][^=\[\s]*)", text, re.M)]
    return sorted(set(names))


def _copy_dists(dest: Path) -> None:
    """Each layer distribution's files from the venv (per RECORD), hard-linked, without bytecode."""
    for name in _layer_dists():
        dist = metadata.distribution(name)
        base = Path(str(dist.locate_file("")))
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            target = dest / file.as_posix()
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                os.link(base / file.as_posix(), target)


@contextmanager
def lambda_tree() -> Iterator[Path]:
    """A temporary `task/` + `opt/python/` tree of the model step with no bytecode at all, and every
    function's own code under `functions/<dir>/` (the other functions' layers are a subset of the model
    step's: what they import from it is what they would import from their own)."""
    with tempfile.TemporaryDirectory(prefix="stepwise-bench-") as tmp:
        root = Path(tmp)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(ROOT / "functions" / "step", root / "task", ignore=ignore)
        shutil.copytree(ROOT / "functions", root / "functions", ignore=ignore)
        (root / "minimal").mkdir()
        (root / "minimal" / "minimal_app.py").write_text(MINIMAL_APP)
        _copy_dists(root / "opt" / "python")
        shutil.copytree(ROOT / "shared" / "stepwise", root / "opt" / "python" / "stepwise", ignore=ignore)
        yield root


STAGE = ROOT / "dist" / "stage"
MODEL_STEP = "StepFunction"


def shipped_bytecode(functions: dict[str, str] | None = None) -> list[str] | None:
    """The sources that the last `make package` shipped bytecode for, as paths in the Lambda-shaped tree
    (`task/...` the model step's code, `functions/<dir>/...` each function's of `functions`, logical id
    → its directory under functions/, and `opt/python/...` the layers'); None without a build (or one
    without bytecode)."""
    layers = STAGE / "layers"
    trees = [("task", STAGE / "functions" / MODEL_STEP)]
    trees += [(f"functions/{d}", STAGE / "functions" / name) for name, d in (functions or {}).items()]
    trees += [("opt/python", p / "python") for p in sorted(layers.iterdir())] if layers.is_dir() else []
    found = []
    for prefix, tree in trees:
        if not tree.is_dir():
            continue
        for pyc in tree.rglob("__pycache__/*.cpython-312.pyc"):
            source = pyc.parent.parent / (pyc.name.removesuffix(".cpython-312.pyc") + ".py")
            found.append(f"{prefix}/{source.relative_to(tree).as_posix()}")
    return sorted(found) or None


def compile_tree(root: Path, only: list[str] | None) -> int:
    """Compile the tree's modules (`only` those paths, else all) as `make package` does, but with this
    interpreter; compileall's exit status (1 when some file, e.g. a Python 2 script, does not compile)."""
    targets = [str(root / path) for path in only if (root / path).is_file()] if only else [str(root)]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
        listing.write("".join(f"{target}\n" for target in targets))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "compileall", "-q", "-q", "-j", "0",
             "--invalidation-mode", "unchecked-hash", "-i", listing.name],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0"},
            capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
    finally:
        os.unlink(listing.name)
    return done.returncode


def import_once(
    root: Path, code_dir: str, module: str, env: dict[str, str], then: list[str] | None = None
) -> dict[str, Any]:
    """One import of `module` from the tree in a fresh bare interpreter that writes no bytecode."""
    paths = [str(root / code_dir), str(root / "opt" / "python")]
    code = _CHILD.format(paths=paths, module=module, then=then or [])
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {done.returncode}"}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result

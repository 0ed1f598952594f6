"""`make package`: bytecode for the modules the functions load, compiled by a CPython 3.12 if one is here.

Lambda's /var/task and /opt are read-only, so a module shipped without bytecode is compiled from source
on every cold start (in memory, each time): litellm alone is seconds of that (bench/cold_imports.py
measures its import with and without bytecode).

What is compiled: the modules the functions load, measured here. Each distinct handler module is
imported by packaging/probe.py (`loaded` mode) in a bare interpreter (`-I -S`) over the staged function,
the staged stepwise layer and the project venv's copies of the same pinned releases (x86_64: the
aarch64 build cannot run here; pure-Python files are the same). For the model step that is its whole
SnapStart smoke run: the handler module and litellm at init, a scripted turn, OpenAI-
compatible turns against a loopback fake, token counting. Every loaded `.py` that the function's
staged layers hold gets its `__pycache__/*.cpython-312.pyc`. Not everything: 3.12's bytecode is larger
than its source (it holds column tables), so all of the model step's modules would add ~93 MiB, past
the 250 MiB limit. A module outside the set still works: it compiles at import, as before.

How: `compileall --invalidation-mode unchecked-hash`, so the pyc carries its source's hash and is never
checked against it (the sources cannot change on Lambda; a timestamp pyc would not do: the zips carry
fixed dates), with PYTHONHASHSEED=0 (set and frozenset constants in a fixed order), SOURCE_DATE_EPOCH
fixed, and the build directory swapped for the Lambda path in the code objects (`-s`/`-p`), so the same
sources give the same bytes wherever they are built. All CPython 3.12.x releases share one bytecode
format (magic number 3531); any other interpreter is refused.

The interpreter: $PYTHON312, else `python3.12` on PATH, else what `uv python find --no-python-downloads
3.12` finds already installed, else a pyenv 3.12: the first one that runs and reports CPython 3.12 with
that magic number. Nothing is downloaded. Without one the build says so and ships sources only.

The same measurement guards the trim rules: a rule that removes a file a function loads fails the build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import checks
import trim

PYTHON_ENV = "PYTHON312"
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the zips' date
LAMBDA_TASK = "/var/task"  # where Lambda extracts a function's code
LAMBDA_OPT = "/opt/python"  # where it overlays the layers' python/
PROBE_TIMEOUT = 600
# What the bytecode leaves free under Lambda's limit for every function: it is an optimisation, so it
# gives way (largest files first, from the layers the fewest functions carry) rather than fail the
# build. The margin is for Lambda's own count, which is not documented to the byte; an upgrade's larger
# sources need none: they push bytecode out first.
HEADROOM = 4 * 1024 * 1024


@dataclass
class Interpreter:
    path: str | None
    version: str = ""
    tried: list[str] = field(default_factory=list)  # each candidate and why it was not taken


@dataclass
class Loaded:
    """What the functions load: stage files by the tree they are in (a layer's python/, a function)."""

    files: dict[Path, set[str]] = field(default_factory=dict)  # tree -> relative paths of loaded files
    removed: list[str] = field(default_factory=list)  # loaded files a trim rule removed: the build fails


@dataclass
class Compiled:
    python: str | None
    version: str
    files: int = 0  # pyc files shipped
    bytes: int = 0
    by_tree: dict[str, int] = field(default_factory=dict)  # tree (relative to the stage) -> pyc bytes
    dropped_files: int = 0  # compiled, then removed to keep HEADROOM (fit)
    dropped_bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "python": self.version or None,
            "compiled_files": self.files,
            "compiled_bytes": self.bytes,
            "dropped_files": self.dropped_files,
            "dropped_bytes": self.dropped_bytes,
            "by_tree": self.by_tree,
            "invalidation_mode": "unchecked-hash",
        }


# --- the interpreter -----------------------------------------------------------------------------

_REPORT = "import importlib.util, platform, sys; print(sys.implementation.name, platform.python_version(), "
_REPORT += "importlib.util.MAGIC_NUMBER.hex())"


def candidates(uv: Path, missing: list[str]) -> list[str]:
    """Interpreters that may be a CPython 3.12, in order; where none was found, why, into `missing`."""
    found = []
    if os.environ.get(PYTHON_ENV):
        found.append(os.environ[PYTHON_ENV])
    else:
        missing.append(f"${PYTHON_ENV} unset")
    if on_path := shutil.which("python3.12"):
        found.append(on_path)
    else:
        missing.append("no python3.12 on PATH")
    done = None
    if uv.exists():
        done = subprocess.run(
            [str(uv), "python", "find", "--no-python-downloads", "3.12"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    if done is not None and done.returncode == 0 and done.stdout.strip():
        found.append(done.stdout.strip())
    else:
        missing.append("`uv python find 3.12` found none installed" if done else "no uv")
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    pyenv = [str(p) for p in sorted((pyenv_root / "versions").glob("3.12.*/bin/python3.12"), reverse=True)]
    found += pyenv
    if not pyenv:
        missing.append(f"no pyenv 3.12 in {pyenv_root}")
    return list(dict.fromkeys(found))


def find_python(uv: Path) -> Interpreter:
    found = Interpreter(None)
    for path in candidates(uv, found.tried):
        try:
            done = subprocess.run(
                [path, "-c", _REPORT], capture_output=True, text=True, timeout=60, check=False
            )
        except OSError as exc:
            found.tried.append(f"{path}: {exc.strerror}")
            continue
        if done.returncode != 0:
            found.tried.append(f"{path}: does not run (exit {done.returncode})")
            continue
        name, version, magic = done.stdout.split()
        if name != "cpython" or bytes.fromhex(magic) != checks.MAGIC_312:
            found.tried.append(f"{path}: {name} {version}, not CPython 3.12")
            continue
        found.path, found.version = path, version
        return found
    return found


# --- what the functions load ---------------------------------------------------------------------


def measure(
    stage: Path,
    functions: dict[str, Any],
    layers: dict[str, Any],
    model_function: str,
    env: dict[str, dict[str, str]],
    probe: Path,
) -> Loaded:
    """Run probe.py `loaded` once per distinct handler module; map what it loaded onto the stage."""
    site = [Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")]
    site = list(dict.fromkeys(site))
    source_layers = [name for name, layer in layers.items() if layer.pinned is None]
    jobs: dict[str, list[Path]] = {}
    same_code: dict[str, str] = {}  # function -> the one whose measurement it shares
    for name, function in functions.items():
        code = stage / "functions" / name
        twin = next(
            (
                o
                for o in jobs
                if (functions[o].source, _module(functions[o])) == (function.source, _module(function))
            ),
            None,
        )
        if twin is not None and name != model_function:
            same_code[name] = twin  # the same CodeUri and module : loaded once
            continue
        jobs[name] = [code, *(stage / "layers" / n / "python" for n in function.layers if n in source_layers)]

    def run(name: str) -> dict[str, Any]:
        spec = {"paths": [*map(str, jobs[name]), *map(str, site)], "handler_module": _module(functions[name])}
        spec["model"] = name == model_function
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-B", str(probe), "loaded", json.dumps(spec)],
            capture_output=True,
            text=True,
            env=env[name],
            timeout=PROBE_TIMEOUT,
            check=False,
        )
        if done.returncode != 0 or not done.stdout.strip():
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            sys.exit(f"bytecode: measuring what {name} loads failed (exit {done.returncode})")
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return result

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = dict(zip(jobs, pool.map(run, jobs), strict=True))

    out = Loaded()
    for name, result in results.items():
        own = jobs[name]
        pinned = [(stage / "layers" / n / "python", layers[n].pinned) for n in functions[name].layers]
        pinned = [(tree, kind) for tree, kind in pinned if kind]
        for file in map(Path, result["files"]):
            tree = next((t for t in own if file.is_relative_to(t)), None)
            if tree is not None:
                out.files.setdefault(tree, set()).add(file.relative_to(tree).as_posix())
                continue
            base = next((s for s in site if file.is_relative_to(s)), None)
            if base is None:
                continue  # the interpreter's standard library
            rel = file.relative_to(base).as_posix()
            for tree, kind in pinned:
                if (tree / rel).is_file():
                    out.files.setdefault(tree, set()).add(rel)
                elif (tree / rel.split("/")[0]).exists() and (rule := trim.removed_by(rel, kind)):
                    out.removed.append(f"{name} loads {rel}, which rule {rule.pattern!r} removes from {kind}")
    for name, twin in same_code.items():
        out.files[stage / "functions" / name] = set(out.files.get(stage / "functions" / twin, set()))
    out.removed = sorted(set(out.removed))
    return out


def _module(function: Any) -> str:
    return str(function.handler.rpartition(".")[0])


# --- compiling -----------------------------------------------------------------------------------


def compile_loaded(stage: Path, loaded: Loaded, python: Interpreter, third_party: set[Path]) -> Compiled:
    """Compile every loaded `.py` in place (`__pycache__/` next to it), as Lambda will find it.

    The trees in `third_party` (the pinned layers) are compiled with `-X no_debug_ranges`: 6% smaller,
    and a traceback through a library's frame shows its line without the `^^^` column marks. Stepwise's
    own code keeps them."""
    assert python.path is not None
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONHASHSEED": "0",
        "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH,
        "LANG": "C.UTF-8",
    }
    done = Compiled(python.path, python.version)
    for tree, files in sorted(loaded.files.items()):
        sources = sorted(f for f in files if f.endswith(".py"))
        if not sources:
            continue
        prefix = LAMBDA_TASK if tree.relative_to(stage).parts[0] == "functions" else LAMBDA_OPT
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
            listing.write("".join(f"{tree / f}\n" for f in sources))
        try:
            ran = subprocess.run(
                [
                    python.path, *(["-X", "no_debug_ranges"] if tree in third_party else []),
                    "-m", "compileall", "-q", "-f",
                    "--invalidation-mode", "unchecked-hash",
                    "-s", str(tree), "-p", prefix,
                    "-i", listing.name,
                ],
                capture_output=True, text=True, env=env, timeout=1800, check=False,
            )  # fmt: skip
        finally:
            os.unlink(listing.name)
        if ran.returncode != 0:
            sys.stderr.write(ran.stdout[-4000:] + ran.stderr[-4000:])
            sys.exit(f"bytecode: {python.path} could not compile every module of {tree}")
        size = sum(p.stat().st_size for p in tree.rglob("*.cpython-312.pyc"))
        done.by_tree[tree.relative_to(stage).as_posix()] = size
        done.files += len(sources)
        done.bytes += size
    return done


def fit(stage: Path, trees_of: dict[str, list[Path]], limit: int, done: Compiled) -> None:
    """Remove bytecode until every function with its layers (`trees_of`: its stage trees) is at least
    HEADROOM under `limit`: from the trees the fewest functions carry, largest files first."""
    size = {tree: _bytes(tree) for trees in trees_of.values() for tree in trees}
    carriers = {tree: sum(tree in trees for trees in trees_of.values()) for tree in size}
    for trees in sorted(trees_of.values(), key=lambda trees: -sum(size[t] for t in trees)):
        over = sum(size[t] for t in trees) - (limit - HEADROOM)
        if over <= 0:
            continue
        pycs = [(carriers[t], -p.stat().st_size, p, t) for t in trees for p in t.rglob("*.cpython-312.pyc")]
        for _, negative, path, tree in sorted(pycs):
            if over <= 0:
                break
            path.unlink()
            size[tree] += negative
            over += negative
            done.files -= 1
            done.bytes += negative
            done.dropped_files += 1
            done.dropped_bytes -= negative
            done.by_tree[tree.relative_to(stage).as_posix()] += negative


def _bytes(tree: Path) -> int:
    return sum(p.stat().st_size for p in tree.rglob("*") if p.is_file())

"""`make package`: every function and layer of template.yaml built for Lambda (python3.12, arm64).

Without Docker or an arm64 machine: the layers' third-party dependencies are cross-installed as
manylinux aarch64 wheels for CPython 3.12 (`pip install --platform ... --only-binary=:all:`), each
checked against the hash in requirements/main.lock, then trimmed by the reviewed rules in trim.py,
checked (checks.py), zipped deterministically, and measured against Lambda's 250 MiB limit.

    .venv/bin/python packaging/build.py [--out dist] [--verify]

Writes into `--out` (default dist/, git-ignored):
    layers/<Layer>.zip          python/ at the root, as Lambda extracts layers into /opt
    functions/<Function>.zip    the function's CodeUri, handler at the root
    statemachine/               the ASL files the template names
    template.json               template.yaml with CodeUri/ContentUri/DefinitionUri on the above:
                                `sam deploy --template-file dist/template.json --config-file
                                "$PWD/samconfig.toml"` uploads them as they are
    manifest.json, sizes.json   what was built, and its sizes (packaging/sizes.py, bench/package_sizes.py)
    stage/                      the unzipped trees the zips were made from

Fails (exit 1) when a layer is stale against the lock, a wheel's hash does not match, a file is
built for another platform, a requirement is missing, a trim rule matched nothing, or a function
with its layers is over the limit.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import bytecode
import checks
import sizes
import trim

from stepwise_local.cfn_yaml import load_template

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "template.yaml"
PIN = ROOT / "layers" / "pin.py"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # fixed, so an unchanged tree zips to the same bytes (and S3 key)
SKIPPED_SOURCES = ("__pycache__", "*.pyc", "*.egg-info", ".DS_Store")


def load_module(name: str, path: Path) -> ModuleType:
    """A script of this repository as a module (layers/pin.py has no package to be imported from)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


@dataclass
class Layer:
    name: str  # logical id
    source: Path  # ContentUri
    pinned: str | None  # the layers/<name>/ requirements set it installs, None for a source layer
    consumers: set[str] = field(default_factory=set)  # functions that carry it


@dataclass
class Function:
    name: str
    source: Path  # CodeUri
    layers: list[str]  # Globals layers, then its own, in the order Lambda overlays them
    handler: str  # module.function


def plan(template: dict[str, Any], pinned_layers: set[str]) -> tuple[dict[str, Layer], dict[str, Function]]:
    resources = template["Resources"]
    layers = {}
    for name, res in resources.items():
        if res["Type"] == "AWS::Serverless::LayerVersion":
            source = ROOT / res["Properties"]["ContentUri"]
            layers[name] = Layer(name, source, source.name if source.name in pinned_layers else None)
    global_layers = template.get("Globals", {}).get("Function", {}).get("Layers", [])
    functions = {}
    for name, res in resources.items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        refs = [*global_layers, *res["Properties"].get("Layers", [])]
        props = res["Properties"]
        functions[name] = Function(
            name, ROOT / props["CodeUri"], [ref["Ref"] for ref in refs], props["Handler"]
        )
        for layer in functions[name].layers:
            layers[layer].consumers.add(name)
    return layers, functions


def install_sets(layers: dict[str, Layer], pin: ModuleType) -> dict[str, set[str]]:
    """The distributions each pinned layer installs.

    A layer whose every function also carries another pinned layer leaves out that layer's
    distributions: both pin them to the same lock version, and Lambda overlays all layers in
    /opt/python, so a second copy would only count twice against the 250 MiB (the model layer
    shares about 39 MB with the core layer). Distributions in trim.SKIP_DISTS are never installed.
    """
    closures = {
        layer.name: pin.closure(pin.LAYERS[layer.pinned]) for layer in layers.values() if layer.pinned
    }
    order = list(closures)

    def relies_on(name: str, other: str) -> bool:
        mine, theirs = layers[name].consumers, layers[other].consumers
        # With the same consumers, the layer listed first in the template keeps the shared ones.
        return mine < theirs or (mine == theirs and order.index(other) < order.index(name))

    sets = {}
    for name, names in closures.items():
        covered = {
            dist for other in order if other != name and relies_on(name, other) for dist in closures[other]
        }
        sets[name] = names - covered - set(trim.SKIP_DISTS)
    return sets


def requirements(layer: Layer, names: set[str], pin: ModuleType) -> str:
    """A hash-checking requirements file: `names`, pinned and hashed exactly as main.lock has them."""
    text = pin.render(layer.pinned, pin.lock_versions(), pin.lock_hashes())
    blocks = re.split(r"\n(?=\S)", text)
    chosen = [b for b in blocks if not b.startswith("#") and _dist(b) in names]
    missing = names - {_dist(b) for b in chosen}
    if missing:
        sys.exit(f"{layer.name}: {sorted(missing)} not in the rendered pins")
    return "\n".join(chosen) + "\n"


def _dist(block: str) -> str:
    return re.split(r"[\[=]", block, maxsplit=1)[0].strip().lower()


def pip_install(req_file: Path, target: Path) -> None:
    platforms = [arg for platform in checks.PLATFORMS for arg in ("--platform", platform)]
    command = [
        sys.executable, "-m", "pip", "install",
        "--quiet", "--disable-pip-version-check", "--no-input",
        "--require-hashes", "--no-deps", "--only-binary=:all:", "--no-compile",
        "--implementation", "cp", "--python-version", ".".join(map(str, checks.PYTHON)),
        *platforms,
        "--target", str(target),
        "-r", str(req_file),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        sys.exit(f"pip could not install {req_file.name} for python3.12 arm64 (exit {done.returncode})")


def copy_sources(source: Path, dest: Path) -> None:
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns(*SKIPPED_SOURCES), dirs_exist_ok=True)


def write_zip(tree: str, dest: str) -> None:
    """Zip `tree`'s contents (not the directory itself), in a fixed order with fixed dates."""
    root = Path(tree)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in files:
            info = zipfile.ZipInfo(path.relative_to(root).as_posix(), date_time=ZIP_DATE)
            # Lambda runs code as another user than the one that extracts it: everything readable.
            mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes(), compresslevel=6)


def packaged_template(template: dict[str, Any], out: Path) -> dict[str, Any]:
    """template.yaml with every local path pointing at the built artifacts (relative to `out`)."""
    packaged = copy.deepcopy(template)
    for name, res in packaged["Resources"].items():
        props = res.get("Properties", {})
        if res["Type"] == "AWS::Serverless::Function":
            props["CodeUri"] = f"functions/{name}.zip"
        elif res["Type"] == "AWS::Serverless::LayerVersion":
            props["ContentUri"] = f"layers/{name}.zip"
            res.pop("Metadata", None)  # BuildMethod is for `sam build`; these are built already
        elif res["Type"] == "AWS::Serverless::StateMachine" and "DefinitionUri" in props:
            definition = Path(props["DefinitionUri"])
            (out / definition.parent).mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / definition, out / definition)
    return packaged


def build(out: Path) -> sizes.Report:
    began = time.perf_counter()
    pin = load_module("stepwise_layer_pins", PIN)
    assert pin.LAMBDA_ENV["python_version"] == "{}.{}".format(*checks.PYTHON), "pin.py and checks.py disagree"
    stale = subprocess.run([sys.executable, str(PIN), "--check"], capture_output=True, text=True, check=False)
    if stale.returncode != 0:
        sys.exit(
            f"layer pins are stale against the lock; run `.venv/bin/python layers/pin.py`\n{stale.stdout}"
        )

    template = load_template(TEMPLATE)
    layers, functions = plan(template, set(pin.LAYERS))
    shutil.rmtree(out, ignore_errors=True)
    stage = out / "stage"

    trimmed: list[trim.Trimmed] = []
    for name, names in install_sets(layers, pin).items():
        layer = layers[name]
        req_file = stage / "requirements" / f"{layer.pinned}.txt"
        req_file.parent.mkdir(parents=True, exist_ok=True)
        req_file.write_text(requirements(layer, names, pin))
        print(f"installing {name}: {len(names)} distributions for cp312 manylinux aarch64 …", flush=True)
        pip_install(req_file, stage / "layers" / name / "python")
    for name, layer in layers.items():
        python = stage / "layers" / name / "python"
        if layer.pinned is None:
            copy_sources(layer.source, python)
        kind = layer.pinned or "stepwise"
        trimmed.append(trim.trim(python, kind))
    for name, function in functions.items():
        copy_sources(function.source, stage / "functions" / name)

    _report_trim(trimmed)
    compiled = _bytecode(stage, layers, functions)
    _check(layers, functions, stage, pin)

    (out / "layers").mkdir(parents=True)
    (out / "functions").mkdir(parents=True)
    jobs = [(str(stage / "layers" / n), str(out / "layers" / f"{n}.zip")) for n in layers]
    jobs += [(str(stage / "functions" / n), str(out / "functions" / f"{n}.zip")) for n in functions]
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        list(pool.map(write_zip, *zip(*jobs, strict=True)))

    (out / "template.json").write_text(json.dumps(packaged_template(template, out), indent=2) + "\n")
    manifest = {
        "runtime": "python3.12",
        "architecture": "arm64",
        "template": "template.json",
        "layers": {n: f"layers/{n}.zip" for n in layers},
        "functions": {n: {"zip": f"functions/{n}.zip", "layers": f.layers} for n, f in functions.items()},
        "bytecode": compiled,
    }
    (out / sizes.MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    rep = sizes.report(out)
    (out / "sizes.json").write_text(json.dumps(rep.as_json(), indent=2) + "\n")
    print(f"\nbuilt in {time.perf_counter() - began:.0f} s into {out}\n")
    print(sizes.render(rep))
    return rep


def _report_trim(trimmed: list[trim.Trimmed]) -> None:
    for done in trimmed:
        for pattern, size in done.by_rule.items():
            if size:
                print(f"trimmed {done.layer:<8} {pattern:<46} {size / sizes.MIB:7.1f} MiB")
    for dist, why in trim.SKIP_DISTS.items():
        print(f"skipped {dist}: {why.split(':')[0]}")
    if stale := trim.unused_rules(trimmed):
        sys.exit(f"trim rules that matched nothing (update packaging/trim.py): {stale}")


def _bytecode(stage: Path, layers: dict[str, Layer], functions: dict[str, Function]) -> dict[str, Any]:
    """Measure what the functions load, stop if a trim rule removed any of it, compile it (bytecode.py)."""
    import verify  # here, not at the top: verify.py imports this module

    with verify.fake_model() as model_env:
        env = {name: verify.traced_environment(name, model_env) for name in functions}
        loaded = bytecode.measure(stage, functions, layers, verify.FUNCTION, env, verify.PROBE)
    if loaded.removed:
        sys.exit(
            "trim rules remove files the functions load (packaging/trim.py):\n  "
            + "\n  ".join(loaded.removed)
        )
    parts = _litellm_parts(stage, layers, loaded)
    used, shipped = parts["loaded_bytes"] / sizes.MIB, parts["packaged_bytes"] / sizes.MIB
    print(
        f"loaded: litellm {parts['loaded_modules']} of {parts['packaged_modules']} modules ({used:.1f} of "
        f"{shipped:.1f} MiB of source) in the model step; {sum(map(len, loaded.files.values()))} files in all"
    )
    python = bytecode.find_python(Path(sys.executable).parent / "uv")
    if python.path is None:
        print("bytecode: NOT COMPILED: no CPython 3.12 here, so Lambda compiles every module from source at")
        print("          each cold start. Tried: " + ("; ".join(python.tried) or "nothing found"))
        print(f"          (set {bytecode.PYTHON_ENV}=/path/to/python3.12 to name one)")
        return {"python": None, "compiled_files": 0, "tried": python.tried, "litellm": parts}
    pinned = {stage / "layers" / name / "python" for name, layer in layers.items() if layer.pinned}
    compiled = bytecode.compile_loaded(stage, loaded, python, pinned)
    trees_of = {
        name: [stage / "functions" / name, *(stage / "layers" / n / "python" for n in f.layers)]
        for name, f in functions.items()
    }
    bytecode.fit(stage, trees_of, sizes.LIMIT, compiled)
    print(
        f"bytecode: {compiled.files} loaded modules compiled by CPython {python.version} ({python.path}), "
        f"unchecked-hash: {compiled.bytes / sizes.MIB:.1f} MiB"
    )
    if compiled.dropped_files:
        dropped = compiled.dropped_bytes / sizes.MIB
        print(
            f"bytecode: {compiled.dropped_files} more ({dropped:.1f} MiB) left out to keep "
            f"{bytecode.HEADROOM / sizes.MIB:.0f} MiB under the limit: they compile at import"
        )
    return {**compiled.as_json(), "litellm": parts}


def _litellm_parts(stage: Path, layers: dict[str, Layer], loaded: bytecode.Loaded) -> dict[str, int]:
    """How much of litellm's source the model step loads, against what the trimmed layer ships."""
    trees = [stage / "layers" / name / "python" for name, layer in layers.items() if layer.pinned]
    tree = next(t for t in trees if (t / "litellm").is_dir())
    packaged = [p for p in (tree / "litellm").rglob("*.py")]
    used = {f for f in loaded.files.get(tree, set()) if f.startswith("litellm/") and f.endswith(".py")}
    return {
        "loaded_modules": len(used),
        "packaged_modules": len(packaged),
        "loaded_bytes": sum((tree / f).stat().st_size for f in used),
        "packaged_bytes": sum(p.stat().st_size for p in packaged),
    }


def _check(layers: dict[str, Layer], functions: dict[str, Function], stage: Path, pin: ModuleType) -> None:
    problems = []
    for name in layers:
        problems += [f"{name}: {p}" for p in checks.platform_problems(stage / "layers" / name / "python")]
    extras = {
        dist: tuple(extra) for roots in pin.LAYERS.values() for dist, extra in roots if extra
    }  # e.g. aws-lambda-powertools[tracer]
    for name, function in functions.items():
        roots = [stage / "layers" / layer / "python" for layer in function.layers]
        problems += [
            f"{name}: {p}"
            for p in checks.closure_problems(roots, extras, set(trim.SKIP_DISTS), pin.LAMBDA_ENV)
        ]
    if problems:
        sys.exit("the staged layers would not run on Lambda python3.12 arm64:\n  " + "\n  ".join(problems))
    print(
        "checked: every ELF is AArch64, every wheel tag fits cp312 manylinux aarch64, bytecode only 3.12's,"
    )
    print("         every function's layers together satisfy all their requirements")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output directory (default dist/)")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="also apply the trim rules to an x86_64 copy and import-check it (packaging/verify.py)",
    )
    args = parser.parse_args()
    out = args.out.resolve()
    rep = build(out)
    if rep.over:
        print(
            f"\nover Lambda's 250 MiB (function + layers, unzipped): {', '.join(rep.over)}", file=sys.stderr
        )
        return 1
    if args.verify:
        import verify

        return verify.run(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

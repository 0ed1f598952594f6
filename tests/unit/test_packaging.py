"""The Lambda packaging rules (packaging/): what the trim list may remove, and the platform checks.

Pure and fast: the rules are matched against the file lists of the distributions installed in this
venv (the same releases the layers ship), nothing is built or downloaded. `make package` runs the
dynamic counterpart (packaging/verify.py: every litellm module imported with and without the trim).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("core", "model")


def _load(name: str, path: Path) -> ModuleType:
    # packaging/ holds scripts, not a package: as a package it would shadow the `packaging` library.
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


trim = _load("stepwise_packaging_trim", ROOT / "packaging" / "trim.py")
checks = _load("stepwise_packaging_checks", ROOT / "packaging" / "checks.py")
pin = _load("stepwise_layer_pins", ROOT / "layers" / "pin.py")
# bytecode.py imports its siblings by their script names.
sys.modules.setdefault("trim", trim)
sys.modules.setdefault("checks", checks)
bytecode = _load("stepwise_packaging_bytecode", ROOT / "packaging" / "bytecode.py")


@cache
def layer_dists(layer: str) -> list[str]:
    text = (ROOT / "layers" / layer / "requirements.txt").read_text()
    return [canonicalize_name(n) for n in re.findall(r"^([A-Za-z0-9][^=\[\s]*)", text, re.M)]


@cache
def imported_modules() -> set[str]:
    """Every absolute module name stepwise and the handlers import (and `from x import y`'s x.y)."""
    names: set[str] = set()
    sources = [*(ROOT / "shared" / "stepwise").rglob("*.py"), *(ROOT / "functions").glob("*/app.py")]
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def module_paths(module: str) -> list[str]:
    path = module.replace(".", "/")
    return [f"{path}.py", f"{path}/__init__.py"]


# --- the rules ----------------------------------------------------------------------------------


def test_a_directory_rule_removes_everything_under_it_in_its_layer_only() -> None:
    page = "litellm/proxy/_experimental/out/_next/static/chunks/app.js"

    assert trim.removed_by(page, "model").pattern == "litellm/proxy/_experimental/out/"
    assert trim.removed_by(page, "core") is None
    assert trim.removed_by("litellm/proxy/_experimental/post_call_rules.py", "model") is None


def test_a_file_pattern_matches_at_any_depth() -> None:
    assert trim.removed_by("litellm/rust_bridge/_native.pyi", "model").pattern == "*.pyi"
    assert trim.removed_by("litellm/rust_bridge/_native.abi3.so", "model") is None


def test_trim_removes_only_what_a_rule_names(tmp_path: Path) -> None:
    # Given a layer tree with proxy UI assets, a stub, a console script and code
    files = {
        "litellm/proxy/_experimental/out/index.html": b"<html>" * 100,
        "litellm/proxy/_types.py": b"x = 1\n",
        "litellm/rust_bridge/_native.pyi": b"def f() -> int: ...\n",
        "bin/litellm": b"#!/usr/bin/python3\n",
        "litellm/litellm_core_utils/tokenizers/anthropic_tokenizer.json": b"{}",
    }
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)

    # When the model layer's rules are applied
    done = trim.trim(tmp_path, "model")

    # Then exactly the asset, the stub and the script are gone, and their bytes are accounted for
    left = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert left == {
        "litellm/proxy/_types.py",
        "litellm/litellm_core_utils/tokenizers/anthropic_tokenizer.json",
    }
    assert done.removed_files == 3
    assert done.removed_bytes == 600 + len(files["litellm/rust_bridge/_native.pyi"]) + len(
        files["bin/litellm"]
    )
    assert done.by_rule["litellm/proxy/_experimental/out/"] == 600


def test_every_rule_says_why_and_names_known_layers() -> None:
    for rule in trim.RULES:
        assert rule.why.strip(), rule.pattern
        assert set(rule.layers) <= {"core", "model", "stepwise"}, rule.pattern
    for dist, why in trim.SKIP_DISTS.items():
        assert why.strip(), dist


# --- what the rules must never remove --------------------------------------------------------------


def test_no_rule_removes_a_module_stepwise_imports() -> None:
    removed = {
        module: rule.pattern
        for module in imported_modules()
        for layer in LAYERS
        for path in module_paths(module)
        if (rule := trim.removed_by(path, layer))
    }

    assert removed == {}


@pytest.mark.parametrize("layer", LAYERS)
def test_only_code_rules_remove_code_of_a_layer_distribution(layer: str) -> None:
    """The other rules remove data, stubs and scripts only, so no import can notice them: checked against
    every file of every distribution the layer ships, as installed here (the same releases)."""
    removed = []
    for name in layer_dists(layer):
        for file in metadata.distribution(name).files or []:
            path = file.as_posix()
            if path.startswith("..") or not (path.endswith(".py") or ".so" in file.name):
                continue
            if (rule := trim.removed_by(path, layer)) and not rule.code:
                removed.append(path)

    assert removed == []


def test_code_rules_are_the_reviewed_lists_and_remove_python_modules_only() -> None:
    """Code rules are the reviewed lists (the proxy server; googleapis-common-protos and OTLP's other
    signals); each removes .py files of its own distribution, never a native module."""
    reviewed = {
        **{f"litellm/proxy/{path}": ("model", "litellm") for path in trim.PROXY_SERVER},
        **{f"litellm/proxy/{name}_endpoints/": ("model", "litellm") for name in trim.PROXY_ROUTES},
        **{f"google/{name}/": ("core", "googleapis-common-protos") for name in trim.GOOGLEAPIS},
        **{path: ("core", _otel_dist(path)) for path in trim.OTLP_OTHER_SIGNALS},
        **{path: ("core", "sqlalchemy") for path in trim.SQLALCHEMY_UNUSED},
        **{f"sqlalchemy/{name}.*.so": ("core", "sqlalchemy") for name in trim.SQLALCHEMY_ACCELERATORS},
    }
    code = [rule for rule in trim.RULES if rule.code]

    assert sorted(rule.pattern for rule in code) == sorted(reviewed)
    removed_from: dict[tuple[str, str], dict[str, list[str]]] = {}
    for layer, dist in set(reviewed.values()):
        by_rule = removed_from[layer, dist] = {}
        for file in metadata.distribution(dist).files or []:
            if rule_found := trim.removed_by(file.as_posix(), layer):
                by_rule.setdefault(rule_found.pattern, []).append(file.as_posix())
    for rule in code:
        layer, dist = reviewed[rule.pattern]
        assert rule.layers == (layer,), rule.pattern
        removed = removed_from[layer, dist].get(rule.pattern, [])
        assert removed, f"{rule.pattern} matches nothing in {dist}: stale"
        native = [f for f in removed if ".so" in f.rsplit("/", 1)[-1]]
        if rule.pattern.endswith(".*.so"):  # an accelerator: its pure-Python module ships beside it
            shipped = {f.as_posix() for f in metadata.distribution(dist).files or []}
            assert native and all(f"{f.split('.', 1)[0]}.py" in shipped for f in native), rule.pattern
        else:
            assert not native, rule.pattern
    assert trim.removed_by("litellm/proxy/_types.py", "model") is None  # `import litellm` loads it
    assert (
        trim.removed_by("litellm/proxy/guardrails/exception_utils.py", "model") is None
    )  # a completion does
    assert trim.removed_by("opentelemetry/proto/trace/v1/trace_pb2.py", "core") is None
    assert trim.removed_by("google/protobuf/message.py", "core") is None


def _otel_dist(path: str) -> str:
    return (
        "opentelemetry-proto"
        if path.startswith("opentelemetry/proto/")
        else (
            "opentelemetry-exporter-otlp-proto-http"
            if "/http/" in path
            else "opentelemetry-exporter-otlp-proto-common"
        )
    )


# SQLAlchemy as the trimmed core layer has it: every Cython accelerator a rule removes is loaded from
# the pure-Python module beside it (a finder ahead of the .so), then a query runs through an engine.
_SQLALCHEMY_WITHOUT_ACCELERATORS = """
import importlib.abc, importlib.util, json, sys
from pathlib import Path
ACCELERATORS = {names!r}
base = Path(importlib.util.find_spec("sqlalchemy").origin).parent

class PurePython(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        rel = name.removeprefix("sqlalchemy.").replace(".", "/")
        if name.startswith("sqlalchemy.") and rel in ACCELERATORS:
            return importlib.util.spec_from_file_location(name, base / (rel + ".py"))
        return None

sys.meta_path.insert(0, PurePython())
from sqlalchemy import create_engine, text
from sqlalchemy.util import _has_cython
engine = create_engine("sqlite://")
with engine.begin() as conn:
    conn.execute(text("create table t (id integer primary key, name text)"))
    conn.execute(text("insert into t (name) values (:a), (:b)"), {{"a": "x", "b": "y"}})
    rows = [tuple(r) for r in conn.execute(text("select id, name from t order by id"))]
    mapped = [dict(r) for r in conn.execute(text("select name from t where id = 2")).mappings()]
files = [getattr(m, "__file__", None) or "" for m in list(sys.modules.values())]
loaded = sorted(f for f in files if "_cy." in f)
print(json.dumps([_has_cython.HAS_CYEXTENSION, rows, mapped, loaded]))
"""


def test_sqlalchemy_runs_without_the_accelerators_a_rule_removes() -> None:
    probe = _SQLALCHEMY_WITHOUT_ACCELERATORS.format(names=list(trim.SQLALCHEMY_ACCELERATORS))
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    has_cython, rows, mapped, loaded = json.loads(out.stdout.strip().splitlines()[-1])

    assert has_cython is False
    assert rows == [[1, "x"], [2, "y"]] and mapped == [{"name": "y"}]
    assert len(loaded) == len(trim.SQLALCHEMY_ACCELERATORS) and all(f.endswith("_cy.py") for f in loaded)


# A fresh interpreter with tracing on, as a function with OTEL_EXPORTER_OTLP_ENDPOINT set runs it: one span
# with an error status and an exception event, through stepwise.core.tracing's provider and the OTLP/HTTP
# exporter to a closed loopback port (the export fails after encoding; that is all this needs).
_EXPORT_A_SPAN = """
import json, sys
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode
from stepwise.core import tracing
assert tracing.enabled()
span = trace.get_tracer("probe").start_span("probe", attributes={"stepwise.run_id": "r", "n": 1})
span.set_status(Status(StatusCode.ERROR, "failed"))
span.record_exception(ValueError("x"))
span.end()
tracing.flush()
print(json.dumps(sorted({m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)})))
"""


def test_exporting_a_span_over_otlp_loads_no_module_a_rule_removes() -> None:
    site = Path(metadata.distribution("opentelemetry-proto").locate_file("")).resolve()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT / "shared"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
        "AWS_LAMBDA_FUNCTION_NAME": "probe",
    }
    done = subprocess.run(
        [sys.executable, "-c", _EXPORT_A_SPAN],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = [Path(f).resolve() for f in json.loads(done.stdout.strip().splitlines()[-1])]
    rel = [f.relative_to(site).as_posix() for f in loaded if f.is_relative_to(site)]

    assert "opentelemetry/exporter/otlp/proto/common/_internal/trace_encoder/__init__.py" in rel
    assert "opentelemetry/proto/collector/trace/v1/trace_service_pb2.py" in rel
    assert {f: rule.pattern for f in rel for layer in LAYERS if (rule := trim.removed_by(f, layer))} == {}


# --- botocore's service models ------------------------------------------------------------------------

_LITERAL = re.compile(r"""["']([a-z0-9][a-z0-9-]*)["']""")


def _botocore_services() -> set[str]:
    data = Path(str(metadata.distribution("botocore").locate_file("botocore/data")))
    return {p.name for p in data.iterdir() if p.is_dir()}


def test_every_service_that_shipped_code_names_keeps_its_botocore_model() -> None:
    """Every string literal naming an AWS service in any .py of the layers' distributions (botocore: its
    credential and token providers), of stepwise and of the handlers keeps that service's model."""
    services = _botocore_services()
    named: dict[str, set[str]] = {}
    sources = [*(ROOT / "shared").rglob("*.py"), *(ROOT / "functions").rglob("*.py")]
    for dist in {d for layer in LAYERS for d in layer_dists(layer)}:
        distribution = metadata.distribution(dist)
        for file in distribution.files or []:
            path = file.as_posix()
            if not path.endswith(".py") or path.startswith(".."):
                continue
            if path.startswith("botocore/") and path not in ("botocore/credentials.py", "botocore/tokens.py"):
                continue  # botocore's per-service customisations name services without creating clients
            sources.append(Path(str(distribution.locate_file(file))))
    for source in sources:
        for word in set(_LITERAL.findall(source.read_text(errors="replace"))) & services:
            named.setdefault(word, set()).add(source.name)

    assert {"dynamodb", "stepfunctions", "bedrock-runtime", "sts", "sso-oidc"} <= set(named)
    assert sorted(set(named) - set(trim.BOTOCORE_SERVICES)) == []
    assert sorted(set(trim.BOTOCORE_SERVICES) - services) == []  # no stale name
    removed = [s for s in services if trim.removed_by(f"botocore/data/{s}/", "core", is_dir=True)]
    assert sorted(set(removed) & set(named)) == []
    assert len(removed) == len(services) - len(trim.BOTOCORE_SERVICES) > 300


def test_a_kept_service_keeps_its_models_and_loses_only_its_examples() -> None:
    kept = "botocore/data/dynamodb/2012-08-10/"
    for name in ("service-2.json.gz", "paginators-1.json", "waiters-2.json", "endpoint-rule-set-1.json.gz"):
        assert trim.removed_by(kept + name, "core") is None, name
    assert trim.removed_by(kept + "examples-1.json", "core").pattern == "botocore/data/*/examples-1.json"
    assert (
        trim.removed_by("botocore/data/ivs/2020-07-14/service-2.json.gz", "core").pattern
        == "botocore/data/*/"
    )
    for shared in ("endpoints.json", "partitions.json", "sdk-default-configuration.json", "_retry.json"):
        assert trim.removed_by(f"botocore/data/{shared}", "core") is None, shared
    assert trim.removed_by("botocore/data/ivs/2020-07-14/service-2.json.gz", "model") is None


def test_botocores_examples_are_read_by_the_docs_modules_only() -> None:
    readers = []
    for dist in ("botocore", "boto3"):
        for file in metadata.distribution(dist).files or []:
            if file.suffix == ".py" and "examples-1" in file.read_text():
                readers.append(file.as_posix())

    assert readers and all(r.startswith(("botocore/docs/", "boto3/docs/")) for r in readers), readers


def test_no_rule_removes_litellms_offline_data() -> None:
    """The cost map (LITELLM_LOCAL_MODEL_COST_MAP) and the tokenizer files litellm counts tokens with."""
    kept_dirs = [k for k in trim.KEEP if k.endswith("/")]
    litellm_files = [f.as_posix() for f in metadata.distribution("litellm").files or []]
    under_keep = [f for f in litellm_files if any(f.startswith(d) for d in kept_dirs)]

    assert any(f.endswith("anthropic_tokenizer.json") for f in under_keep), "KEEP no longer matches litellm"
    assert [f for f in under_keep if trim.removed_by(f, "model")] == []
    for path in trim.KEEP:
        assert trim.removed_by(path, "model", is_dir=path.endswith("/")) is None, path


def test_skipped_distributions_are_pinned_and_never_imported_by_stepwise() -> None:
    for dist in trim.SKIP_DISTS:
        assert any(dist in layer_dists(layer) for layer in LAYERS), f"{dist} is in no layer: stale entry"
        tops = {f.parts[0] for f in metadata.distribution(dist).files or [] if f.parts[0] != ".."}
        packages = {t for t in tops if not t.endswith(".dist-info")}
        assert not {m for m in imported_modules() if m.split(".")[0] in packages}, dist


# --- hashes and platform checks ----------------------------------------------------------------------


@pytest.mark.parametrize("layer", LAYERS)
def test_every_layer_pin_has_hashes_in_the_lock(layer: str) -> None:
    hashes = pin.lock_hashes()

    assert [name for name in layer_dists(layer) if not hashes.get(name)] == []


def _elf(tmp_path: Path, machine: int) -> Path:
    path = tmp_path / f"ext-{machine}.so"
    path.write_bytes(b"\x7fELF" + bytes([2, 1, 1]) + bytes(11) + machine.to_bytes(2, "little") + bytes(44))
    return path


def test_an_aarch64_extension_passes_and_an_x86_64_one_does_not(tmp_path: Path) -> None:
    assert checks.elf_problem(_elf(tmp_path, 183)) is None
    assert "not AArch64" in checks.elf_problem(_elf(tmp_path, 62))
    assert checks.elf_problem(Path(__file__)) is None  # not ELF at all


def test_platform_problems_name_foreign_extensions_bytecode_and_wheel_tags(tmp_path: Path) -> None:
    # Given a layer tree with one file of each kind that cannot run on python3.12 arm64
    (tmp_path / "good.cpython-312-aarch64-linux-gnu.so").write_bytes(_elf(tmp_path, 183).read_bytes())
    (tmp_path / "bad.cpython-311-x86_64-linux-gnu.so").write_bytes(_elf(tmp_path, 62).read_bytes())
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"")
    for dist, tag in (("ok-1.0", "cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64"),
                      ("pure-1.0", "py2-none-any\nTag: py3-none-any"),
                      ("x86-1.0", "cp311-cp311-manylinux_2_17_x86_64")):  # fmt: skip
        (tmp_path / f"{dist}.dist-info").mkdir()
        (tmp_path / f"{dist}.dist-info" / "WHEEL").write_text(f"Wheel-Version: 1.0\nTag: {tag}\n")
    for scratch in tmp_path.glob("ext-*.so"):
        scratch.unlink()

    # When the tree is checked
    problems = checks.platform_problems(tmp_path)

    # Then the x86_64 extension (twice: header and name), the bytecode and the x86 wheel are named
    assert len(problems) == 4, problems
    assert all(any(k in p for k in ("bad.cpython", "__pycache__", "x86-1.0")) for p in problems)


# --- bytecode -----------------------------------------------------------------------------------------


def _pyc(
    tmp_path: Path, name: str, magic: bytes = checks.MAGIC_312, flags: int = checks.UNCHECKED_HASH
) -> Path:
    (tmp_path / f"{name}.py").write_text("x = 1\n")
    path = tmp_path / "__pycache__" / f"{name}.cpython-312.pyc"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(magic + flags.to_bytes(4, "little") + bytes(8) + b"code")
    return path


def test_only_312_unchecked_hash_bytecode_next_to_its_source_passes(tmp_path: Path) -> None:
    good = _pyc(tmp_path, "good")
    timestamp = _pyc(tmp_path, "stamped", flags=0)
    checked = _pyc(tmp_path, "checked", flags=0b11)
    other = _pyc(tmp_path, "other", magic=(3495).to_bytes(2, "little") + b"\r\n")  # 3.11's
    orphan = _pyc(tmp_path, "orphan")
    (tmp_path / "orphan.py").unlink()

    assert checks.bytecode_problem(good) is None
    assert "unchecked" in checks.bytecode_problem(timestamp)
    assert "unchecked" in checks.bytecode_problem(checked)
    assert "not CPython 3.12" in checks.bytecode_problem(other)
    assert "without its source" in checks.bytecode_problem(orphan)
    assert checks.platform_problems(tmp_path) == [
        f"__pycache__/{p.name}: {checks.bytecode_problem(p)}"
        for p in sorted((checked, orphan, other, timestamp))
    ]


def test_an_interpreter_that_does_not_run_or_is_not_312_is_passed_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given $PYTHON312 naming this 3.11 interpreter, nothing on PATH, no uv and no pyenv
    monkeypatch.setenv(bytecode.PYTHON_ENV, sys.executable)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))

    found = bytecode.find_python(tmp_path / "no-uv")

    assert found.path is None
    assert found.tried == [
        "no python3.12 on PATH",
        "no uv",
        f"no pyenv 3.12 in {tmp_path}",
        f"{sys.executable}: cpython {sys.version.split()[0]}, not CPython 3.12",
    ]


def test_bytecode_gives_way_largest_first_in_the_layer_fewest_functions_carry(tmp_path: Path) -> None:
    # Given two functions sharing a core tree; the model tree is only the big function's
    core, model, small = tmp_path / "core", tmp_path / "model", tmp_path / "small"
    sizes = {core: [300], model: [100, 500, 200], small: [10]}
    for tree, pycs in sizes.items():
        for n, size in enumerate(pycs):
            (tree / "__pycache__").mkdir(parents=True, exist_ok=True)
            (tree / "__pycache__" / f"m{n}.cpython-312.pyc").write_bytes(bytes(size))
    done = bytecode.Compiled("python3.12", "3.12.1", files=5, bytes=1110, by_tree={"core": 300, "model": 800})
    limit = bytecode.HEADROOM + 1000  # the big function holds 1100 bytes: 100 over

    # When the bytecode is fitted
    bytecode.fit(tmp_path, {"big": [core, model], "other": [core, small]}, limit, done)

    # Then the model tree's largest file went (core, which both carry, stays), and it is accounted for
    left = sorted(f"{p.parent.parent.name}/{p.name.split('.')[0]}" for p in tmp_path.rglob("*.pyc"))
    assert left == ["core/m0", "model/m0", "model/m2", "small/m0"]
    assert (done.files, done.bytes, done.dropped_files, done.dropped_bytes) == (4, 610, 1, 500)
    assert done.by_tree["model"] == 300


def test_the_web_consoles_files_ship_in_the_stepwise_layer() -> None:
    # The API function serves them from the package (stepwise.console.assets): no rule may trim them.
    from stepwise.console import assets

    names = set(assets.files())
    assert {"index.html", "app.js", "style.css"} <= names
    for name in names:
        relpath = f"stepwise/console/static/{name}"
        assert (ROOT / "shared" / relpath).is_file()
        assert trim.removed_by(relpath, "stepwise") is None, relpath

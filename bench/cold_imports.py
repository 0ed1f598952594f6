"""Cold import time of each Lambda handler module, each in a fresh interpreter with Lambda's environment.

The handler module is what Lambda imports during a cold start's init phase, so its import time is the
part of cold start this code controls. Each function's module is imported in a new `python` process
(REPEATS times, median reported) and the child reports whether litellm ended up in sys.modules: only
StepFunction should pay for it (DESIGN.md; tests/unit/test_imports.py guards the API side). These
imports use the venv's warm bytecode.

Then every function as Lambda loads it (bench/import_trees.py: a copy of the code and layers with no
bytecode, then the same copy compiled as `make package` ships it): each handler module next to a
minimal Powertools Lambda measured in the same rounds (the goal: at most twice the minimal's, from
source and with bytecode); the API function's first requests (what a resource's first request imports
on top: its route module, stepwise.api.routing); and litellm, which the model step's first call loads.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import import_trees
from bench.harness import Section, median

REPEATS = 7  # measured imports per handler module (after one discarded import that writes .pyc files)
DEFERRED_REPEATS = 3  # measured imports of litellm as the first model call pays it (~seconds each)
TOP_IMPORTS = 4  # heaviest packages listed per module from one `-X importtime` run
TREE_REPEATS = 7  # imports of the minimal Lambda and of the model step from the Lambda-shaped copy
TREE_LITELLM_REPEATS = 3  # imports of litellm from it (seconds each without bytecode)
MODEL_STEP = "StepFunction"
GOAL_RATIO = 2.0  # the model step's handler import against the minimal Powertools Lambda's

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import importlib, json, sys, time
sys.path.insert(0, {code_dir!r})
began = time.perf_counter()
importlib.import_module({module!r})
ms = (time.perf_counter() - began) * 1000
loaded = {{"ms": ms, "litellm": "litellm" in sys.modules, "llm_client": {client!r} in sys.modules}}
if {deferred!r}:
    began = time.perf_counter()
    for name in {deferred!r}:
        importlib.import_module(name)
    loaded["deferred_ms"] = (time.perf_counter() - began) * 1000
print(json.dumps({{**loaded, "modules": len(sys.modules)}}))
"""
# stepwise.llm.client imports litellm on the first model call, not at import; a handler that loads the
# client pays these on its first invocation instead (the scripted provider is what that call loads).
LLM_CLIENT = "stepwise.llm.client"
DEFERRED = ["litellm", "stepwise.llm.scripted"]


def _functions() -> list[dict[str, Any]]:
    from stepwise_local.cfn_yaml import load_template
    from stepwise_local.stack import TEMPLATE

    template = load_template(TEMPLATE)
    params = {k: str(v.get("Default", "")) for k, v in template.get("Parameters", {}).items()}
    global_vars = template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    out = []
    for logical, res in template["Resources"].items():
        if res["Type"] != "AWS::Serverless::Function":
            continue
        props = res["Properties"]
        variables = {**global_vars, **(props.get("Environment") or {}).get("Variables", {})}
        module, _, handler = props["Handler"].rpartition(".")
        out.append(
            {
                "function": logical,
                "code_dir": str(ROOT / props["CodeUri"]),
                "module": module,
                "handler": handler,
                "source": f"{props['CodeUri'].rstrip('/')}/{module.replace('.', '/')}.py",
                "env": {name: _value(name, value, params) for name, value in variables.items()},
            }
        )
    return out


def _value(name: str, value: Any, params: dict[str, str]) -> str:
    """A template variable as Lambda would see it: parameters at their defaults, resource ids dummies."""
    if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in params:
        return params[value["Ref"]]
    if isinstance(value, dict):
        return f"bench-dummy-{name.lower()}"
    return str(value)


def _child_env(fn: dict[str, Any]) -> dict[str, str]:
    # Only what a Lambda sandbox has (plus the layer's code on PYTHONPATH): nothing leaks from this shell.
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT / "shared"),
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_LAMBDA_FUNCTION_NAME": fn["function"],
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        **fn["env"],
    }


def _import_once(fn: dict[str, Any], deferred: list[str] | None = None) -> dict[str, Any]:
    code = _CHILD.format(
        code_dir=fn["code_dir"], module=fn["module"], client=LLM_CLIENT, deferred=deferred or []
    )
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=_child_env(fn),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    wall = (time.perf_counter() - began) * 1000
    if done.returncode != 0:
        return {
            "error": done.stderr.strip().splitlines()[-1]
            if done.stderr.strip()
            else f"exit {done.returncode}"
        }
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_ms"] = wall
    return result


_IMPORTTIME = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s+)(\S+)$")


def _heaviest(fn: dict[str, Any]) -> list[tuple[str, float]]:
    """The top-level packages with the largest cumulative import time, from one -X importtime run."""
    code = f"import sys; sys.path.insert(0, {fn['code_dir']!r}); import {fn['module']}"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        env=_child_env(fn),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    first: dict[str, float] = {}
    for line in done.stderr.splitlines():
        match = _IMPORTTIME.match(line)
        if not match:
            continue
        root = match.group(4).split(".")[0]
        cumulative_ms = int(match.group(2)) / 1000
        if root == fn["module"]:
            continue
        # Lines come innermost first; a package's own line (the last for its root) holds its total.
        first[root] = max(first.get(root, 0.0), cumulative_ms)
    return sorted(first.items(), key=lambda kv: kv[1], reverse=True)[:TOP_IMPORTS]


def run() -> Section:
    section = Section("Cold imports (handler module in a fresh interpreter)")
    functions = _functions()
    # Functions sharing a CodeUri and module import the same file: measure once.
    measured: dict[tuple[str, str], dict[str, Any]] = {}
    for fn in functions:
        key = (fn["code_dir"], fn["module"])
        if key in measured:
            continue
        _import_once(fn)  # writes .pyc files, as a deployed package would already have them
        samples = [_import_once(fn) for _ in range(REPEATS)]
        good = [s for s in samples if "error" not in s]
        measured[key] = {
            "import_ms": [s["ms"] for s in good],
            "process_ms": [s["process_ms"] for s in good],
            "litellm": any(s["litellm"] for s in good),
            "llm_client": any(s["llm_client"] for s in good),
            "modules": good[0]["modules"] if good else None,
            "errors": [s["error"] for s in samples if "error" in s],
            "heaviest": _heaviest(fn),
        }

    rows: dict[str, dict[str, Any]] = {}
    for fn in functions:
        m = measured[(fn["code_dir"], fn["module"])]
        if not m["import_ms"]:
            section.add(f"{fn['function']} import", None, "ms", f"failed: {m['errors'][0]}")
            continue
        imp, proc = m["import_ms"], m["process_ms"]
        section.add(
            f"{fn['function']} import ({fn['source']})",
            median(imp),
            "ms",
            f"{min(imp):,.0f}–{max(imp):,.0f}; process {median(proc):,.0f} ms; "
            f"litellm {'IMPORTED' if m['litellm'] else 'no'}; {m['modules']} modules",
            digits=0,
        )
        rows[fn["function"]] = {
            "source": fn["source"],
            "handler": fn["handler"],
            "import_ms_median": median(imp),
            "import_ms": imp,
            "process_ms_median": median(proc),
            "litellm_imported": m["litellm"],
            "loads_llm_client": m["llm_client"],
            "modules_loaded": m["modules"],
            "heaviest_imports_ms": dict(m["heaviest"]),
            "errors": m["errors"],
        }
    at_import = [f for f, r in rows.items() if r["litellm_imported"]]
    section.add(
        "functions with litellm in sys.modules after import",
        ", ".join(at_import) or "none",
        note="litellm is deferred to the first model call",
    )
    callers = [f for f, r in rows.items() if r["loads_llm_client"]]
    section.add("functions that can load litellm (import stepwise.llm.client)", ", ".join(callers) or "none")
    deferred: list[float] = []
    caller = next((fn for fn in functions if fn["function"] in callers), None)
    if caller is not None:
        _import_once(caller, DEFERRED)  # discarded, like the handler imports' first
        samples = [_import_once(caller, DEFERRED) for _ in range(DEFERRED_REPEATS)]
        deferred = [s["deferred_ms"] for s in samples if "deferred_ms" in s]
    if caller is not None and deferred:
        section.add(
            f"{caller['function']} first call: import {' + '.join(DEFERRED)}",
            median(deferred),
            "ms",
            f"median of {len(deferred)}, {min(deferred):,.0f}–{max(deferred):,.0f}; paid by the first "
            "model call of each cold Step sandbox",
            digits=0,
        )
    seen = set()
    for fn in functions:
        m = measured[(fn["code_dir"], fn["module"])]
        if fn["source"] in seen or not m["heaviest"]:
            continue
        seen.add(fn["source"])
        top = ", ".join(f"{name} {ms:,.0f}" for name, ms in m["heaviest"])
        section.notes.append(f"heaviest imports of {fn['source']} (cumulative ms, -X importtime): {top}")
    section.notes.append(
        f"import = median of {REPEATS} imports of the handler module, timed inside a fresh child process "
        "(range after it); process = the whole child (interpreter start + import), closer to Lambda's init."
    )
    section.details = {
        "repeats": REPEATS,
        "functions": rows,
        "deferred_litellm_ms": deferred,
        "deferred_modules": DEFERRED,
    }
    if any(fn["function"] == MODEL_STEP for fn in functions):
        section.details["lambda_tree"] = _lambda_tree(section, functions)
    return section


# What the API function's first request for a resource imports on top of its handler module: the
# resolver and that resource's route module (stepwise.api.routing), for the lightest and the heaviest.
API_FUNCTION = "ApiFunction"
FIRST_REQUESTS = {
    "GET /v1/health": ["stepwise.api.resolver", "stepwise.api.health"],
    "GET /v1/agents": ["stepwise.api.resolver", "stepwise.api.agents"],
}


def _lambda_tree(section: Section, functions: list[dict[str, Any]]) -> dict[str, Any]:
    """Every function's handler module, and the model step's litellm, from a Lambda-shaped copy without
    and then with bytecode, each against the minimal Powertools Lambda measured in the same rounds."""
    distinct: dict[tuple[str, str], dict[str, Any]] = {}
    for fn in functions:
        distinct.setdefault((fn["code_dir"], fn["module"]), fn)
    tree_dirs = {fn["function"]: Path(fn["code_dir"]).name for fn in distinct.values()}
    model = next(fn for fn in functions if fn["function"] == MODEL_STEP)
    api = next((fn for fn in functions if fn["function"] == API_FUNCTION), None)
    out: dict[str, Any] = {}
    with import_trees.lambda_tree() as root:
        for compiled in (False, True):
            label = "from source" if not compiled else "with bytecode"
            if compiled:
                shipped = import_trees.shipped_bytecode(tree_dirs)
                out["compiled"] = len(shipped) if shipped else "all"
                out["compileall_exit"] = import_trees.compile_tree(root, shipped)
                label = f"with bytecode ({'as shipped' if shipped else 'every module'})"
            # One discarded round first (the page cache), then the minimal and each function in turn.
            minimal: list[float] = []
            handler: dict[str, list[dict[str, Any]]] = {name: [] for name in tree_dirs}
            for n in range(TREE_REPEATS + 1):
                one = import_trees.import_once(root, "minimal", "minimal_app", _child_env(model))
                if "error" in one:
                    raise RuntimeError(f"import from the Lambda-shaped copy failed: {one}")
                if n:
                    minimal.append(one["ms"])
                for fn in distinct.values():
                    code = f"functions/{tree_dirs[fn['function']]}"
                    two = import_trees.import_once(root, code, fn["module"], _child_env(fn))
                    if "error" in two:
                        raise RuntimeError(f"import of {fn['function']} from the Lambda-shaped copy: {two}")
                    if n:
                        handler[fn["function"]].append(two)
            floor = median(minimal)
            section.add(
                f"minimal Powertools Lambda import, {label}",
                floor,
                "ms",
                f"Logger + Metrics + a trivial handler; {min(minimal):,.0f}–{max(minimal):,.0f}",
                digits=0,
            )
            rows: dict[str, Any] = {}
            for name, samples in handler.items():
                own = median([h["ms"] for h in samples])
                ratio = own / floor
                section.add(
                    f"{name} handler import, {label}",
                    own,
                    "ms",
                    f"{ratio:.2f}× the minimal's (goal ≤ {GOAL_RATIO:.0f}×)"
                    + ("" if ratio <= GOAL_RATIO else " MISSED")
                    + f"; litellm {'IMPORTED' if any(h['litellm'] for h in samples) else 'no'}",
                    digits=0,
                )
                rows[name] = {"handler_ms": [h["ms"] for h in samples], "ratio_to_minimal": ratio}
            requests: dict[str, list[float]] = {}
            if api is not None:
                code = f"functions/{tree_dirs[api['function']]}"
                for request, modules in FIRST_REQUESTS.items():
                    timed = [
                        import_trees.import_once(root, code, api["module"], _child_env(api), modules)
                        for _ in range(TREE_LITELLM_REPEATS + 1)
                    ][1:]
                    requests[request] = [t["then_ms"] for t in timed if "then_ms" in t]
                    section.add(
                        f"{API_FUNCTION} first {request}: its imports, {label}",
                        median(requests[request]),
                        "ms",
                        f"{' + '.join(modules)} on top of the handler module; median of "
                        f"{len(requests[request])}",
                        digits=0,
                    )
            litellm = [
                import_trees.import_once(root, "task", model["module"], _child_env(model), DEFERRED)
                for _ in range(TREE_LITELLM_REPEATS + 1)
            ][1:]
            if errors := [s["error"] for s in litellm if "error" in s]:
                raise RuntimeError(f"litellm from the Lambda-shaped copy failed: {errors[0]}")
            first_call = [s["then_ms"] for s in litellm]
            section.add(
                f"{MODEL_STEP} first call: import {' + '.join(DEFERRED)}, {label}",
                median(first_call),
                "ms",
                f"median of {len(first_call)}, {min(first_call):,.0f}–{max(first_call):,.0f}",
                digits=0,
            )
            out[label] = {
                "minimal_ms": minimal,
                "functions": rows,
                "handler_ms": rows[MODEL_STEP]["handler_ms"],
                "ratio_to_minimal": rows[MODEL_STEP]["ratio_to_minimal"],
                "worst_ratio": max(r["ratio_to_minimal"] for r in rows.values()),
                "api_first_requests_ms": requests,
                "litellm_ms": first_call,
            }
    section.notes.append(
        "from source / with bytecode: every function's code and the model step's layers copied into a "
        "Lambda-shaped tree with no __pycache__, imported by `python -I -S -B` (median of "
        f"{TREE_REPEATS}, the minimal Powertools Lambda in the same rounds; litellm and the API's first "
        f"requests of {TREE_LITELLM_REPEATS}), then the same after compileall --invalidation-mode "
        "unchecked-hash by this interpreter of the modules the last make package shipped bytecode for "
        "(dist/stage; every module without a build)."
    )
    return out

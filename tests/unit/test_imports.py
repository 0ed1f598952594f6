"""Principle 7: only the model step imports litellm (it costs seconds and hundreds of MB), and the light
events function, which clients keep busy while they follow runs, imports no heavy dependency at all."""

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The Step function imports litellm lazily, on its first model call; every other function never does.
FUNCTIONS = sorted(p.parent.name for p in (ROOT / "functions").glob("*/app.py") if p.parent.name != "step")

HEAVY = ("litellm", "sqlglot", "sqlalchemy", "mcp")

PROBE = """
import json, sys
sys.path.insert(0, {code_dir!r})
import app
print(json.dumps({{name: name in sys.modules for name in {heavy!r}}}))
"""


# Every probe asks about all of these, so each function's handler is imported once for every test here.
PROBED = (*HEAVY, "pydantic", "boto3", "pynamodb", "aws_lambda_powertools.event_handler")


def imported(function: str) -> dict[str, bool]:
    """Which heavy modules importing the function's handler loads, in a fresh interpreter."""
    return {name: loaded for name, loaded in _probed(function).items() if name in HEAVY}


@cache
def _probed(function: str) -> dict[str, bool]:
    env = {
        "PATH": "/usr/bin:/bin",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(code_dir=str(ROOT / "functions" / function), heavy=PROBED)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    )
    loaded: dict[str, bool] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize("function", FUNCTIONS)
def test_no_function_but_the_model_step_imports_litellm(function: str) -> None:
    assert not imported(function)["litellm"], f"functions/{function}/app.py imports litellm"


def test_the_events_function_imports_no_heavy_dependency() -> None:
    assert imported("events") == dict.fromkeys(HEAVY, False)


def test_the_events_function_loads_run_starts_on_its_first_start() -> None:
    """The doors on the events function start runs, but most of its invocations follow one: starting
    (hooks, attachments, webhooks, the idempotency layer: ~150 modules) loads on the first start."""
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    probe = PROBE.format(code_dir=str(ROOT / "functions" / "events"), heavy=("stepwise.runs.start",))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)

    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"stepwise.runs.start": False}


# Every handler does its imports on its first call: its module stays as light as a minimal Powertools
# handler, so its cold start's init is Lambda's alone (bench/cold_imports.py measures it, from source
# and with bytecode), and the API function's first request loads the route modules it needs only.
ALL_FUNCTIONS = sorted(p.parent.name for p in (ROOT / "functions").glob("*/app.py"))
AT_INIT = ("pydantic", "boto3", "pynamodb", "aws_lambda_powertools.event_handler")


@pytest.mark.parametrize("function", ALL_FUNCTIONS)
def test_a_handler_module_loads_neither_pydantic_nor_boto3(function: str) -> None:
    assert {name: _probed(function)[name] for name in AT_INIT} == dict.fromkeys(AT_INIT, False)


# What each route module of the API loads, derived from its import closure: the API function's handler
# is imported, then each module of its routes table (stepwise.api.app.ROUTES) in a fork of that process,
# as a first request for that resource would. Heavy packages load only where a module's routes use them
# (none does today: the MCP SDK, sqlglot, SQLAlchemy, pypdf and litellm all load in the Step function's
# tools or the model call, never in a route), and no module drags in another resource's routes.
HEAVY_FOR_ROUTES = (
    "litellm",
    "mcp",
    "sqlglot",
    "sqlalchemy",
    "pypdf",
    "psycopg",
    "pymysql",
    "uvicorn",
    "starlette",
    "openai",
    "tiktoken",
    "tokenizers",
    "huggingface_hub",
    "aiohttp",
    "opentelemetry.sdk",
)
# module → the heavy packages its routes need, each with its reason. Empty: none needs one.
ROUTES_NEED: dict[str, set[str]] = {}

CLOSURES = """
import json, os, sys
sys.path.insert(0, {code_dir!r})
import app  # the handler module, as Lambda's init imports it
from stepwise.api.app import ROUTES
# What every route module shares (the resolver and its error mapping, pydantic, the stores) is loaded
# once before the forks, so each fork pays its own closure only; none of it is heavy (checked below).
import stepwise.api.resolver, stepwise.api.responses, stepwise.api.params, stepwise.api.context
import stepwise.core.tables
shared = sorted(set(sys.modules))
base = set(sys.modules)
out = {{"": shared}}
for line in ROUTES:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        __import__("stepwise.api." + line.module)
        new = sorted(set(sys.modules) - base)
        os.write(w, json.dumps(new).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 20):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    out[line.module] = json.loads(data)
print(json.dumps(out))
"""


def _loads(name: str, modules: list[str]) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def test_each_route_module_loads_only_what_its_routes_need() -> None:
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    probe = CLOSURES.format(code_dir=str(ROOT / "functions" / "api"))
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env, timeout=120
    )
    closures: dict[str, list[str]] = json.loads(out.stdout.strip().splitlines()[-1])
    shared = closures.pop("")
    route_modules = {f"stepwise.api.{m}" for m in closures}

    wrong = [f"the routes' shared modules load {h}" for h in HEAVY_FOR_ROUTES if _loads(h, shared)]
    wrong += [f"the routes' shared modules load {m}" for m in route_modules.intersection(shared)]
    for module, loaded in closures.items():
        heavy = {h for h in HEAVY_FOR_ROUTES if _loads(h, loaded)} - ROUTES_NEED.get(module, set())
        if heavy:
            wrong.append(f"stepwise.api.{module} loads {sorted(heavy)}, which its routes never need")
        others = sorted(route_modules.intersection(loaded) - {f"stepwise.api.{module}"})
        if others:
            wrong.append(f"stepwise.api.{module} loads other resources' routes: {others}")
        if f"stepwise.api.{module}" not in loaded:
            wrong.append(f"stepwise.api.{module} was loaded by the handler module already")
    assert not wrong, "\n".join(wrong)


def test_a_request_loads_only_its_own_route_module() -> None:
    """GET /v1/health through the API function's handler: the health routes load, no other resource's."""
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    probe = (
        f"import json, sys; sys.path.insert(0, {str(ROOT / 'functions' / 'api')!r})\n"
        "from stepwise.api.app import ROUTES, handle\n"
        "event = {'rawPath': '/v1/health', 'routeKey': 'GET /v1/health', 'headers': {},\n"
        "         'requestContext': {'http': {'method': 'GET', 'path': '/v1/health'}, 'stage': '$default'}}\n"
        "status = handle(event, None)['statusCode']\n"
        "print(json.dumps([status, [l.module for l in ROUTES if 'stepwise.api.' + l.module in sys.modules]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env, timeout=60
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [200, ["health"]]

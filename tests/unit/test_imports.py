"""Principle 7: only the model step imports litellm (it costs seconds and hundreds of MB), and the light
events function, which clients keep busy while they follow runs, imports no heavy dependency at all."""

import json
import subprocess
import sys
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


def imported(function: str) -> dict[str, bool]:
    """Which heavy modules importing the function's handler loads, in a fresh interpreter."""
    env = {
        "PATH": "/usr/bin:/bin",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(code_dir=str(ROOT / "functions" / function), heavy=HEAVY)],
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


# Handlers that do their imports on their first call: their module stays as light as a minimal
# Powertools handler, so its cold start is Lambda's init alone (bench/cold_imports.py measures it).
LIGHT_AT_INIT = ("step", "authorizer")


@pytest.mark.parametrize("function", LIGHT_AT_INIT)
def test_a_light_handler_module_loads_neither_pydantic_nor_boto3(function: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1"}
    probe = PROBE.format(code_dir=str(ROOT / "functions" / function), heavy=("pydantic", "boto3", "pynamodb"))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)

    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "pydantic": False,
        "boto3": False,
        "pynamodb": False,
    }

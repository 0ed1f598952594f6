"""The model step's tracer (observability.lazy_tracer()): no X-Ray SDK at import, the same trace once
an invocation is traced.

Each case runs in a fresh interpreter: whether aws_xray_sdk is in sys.modules is the point, and the
real Tracer patches botocore and httpx process-wide. The X-Ray "daemon" is a UDP socket on loopback
that the child binds itself; Lambda's trace header is set as the runtime sets it for an invocation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"

CHILD = """
import json, os, socket, sys
daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
daemon.bind(("127.0.0.1", 0))
daemon.settimeout(30)
os.environ["AWS_XRAY_DAEMON_ADDRESS"] = "127.0.0.1:%d" % daemon.getsockname()[1]
from stepwise import observability

tracer = observability.lazy_tracer()

@tracer.capture_lambda_handler(capture_response=False)
def handler(event, context):
    return {"echo": event["x"]}

out = {"xray_at_import": "aws_xray_sdk" in sys.modules, "results": [handler({"x": n}, None) for n in (1, 2)]}
out["xray_after_calls"] = "aws_xray_sdk" in sys.modules
if out["xray_after_calls"]:
    out["subsegments"] = [json.loads(daemon.recv(65536).decode().split("\\n", 1)[1]) for _ in (1, 2)]
print(json.dumps(out))
"""

MODEL_STEP_IMPORT = """
import json, sys
sys.path.insert(0, {code_dir!r})
import app
print(json.dumps({{"xray": "aws_xray_sdk" in sys.modules, "litellm": "litellm" in sys.modules}}))
"""


def run(code: str, **env: str) -> dict[str, Any]:
    base = {
        "PATH": "/usr/bin:/bin",
        "AWS_DEFAULT_REGION": "us-east-1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**base, **env},
        timeout=120,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_importing_the_model_step_handler_imports_no_xray_sdk() -> None:
    # In Lambda's environment, where tracing is on: the SDK waits for the first invocation.
    loaded = run(
        MODEL_STEP_IMPORT.format(code_dir=str(ROOT / "functions" / "step")),
        LAMBDA_TASK_ROOT="/var/task",
        AWS_LAMBDA_FUNCTION_NAME="StepFunction",
    )

    assert loaded == {"xray": False, "litellm": False}


def test_a_traced_invocation_sends_the_handlers_subsegment_as_powertools_would() -> None:
    out = run(CHILD, LAMBDA_TASK_ROOT="/var/task", _X_AMZN_TRACE_ID=TRACE_HEADER)

    assert out["xray_at_import"] is False
    assert out["results"] == [{"echo": 1}, {"echo": 2}]
    assert out["xray_after_calls"] is True
    first, second = out["subsegments"]
    assert first["name"] == second["name"] == "## handler"
    assert first["parent_id"] == "53995c3f42cd8ad8"
    assert first["trace_id"] == "1-5759e988-bd862e3fe1be46a994272793"
    # The first traced call is the sandbox's cold start, the next one is not.
    assert first["annotations"] == {"ColdStart": True, "Service": "stepwise"}
    assert second["annotations"] == {"ColdStart": False, "Service": "stepwise"}
    assert "metadata" not in first  # capture_response=False reached Powertools


@pytest.mark.parametrize(
    "env",
    [{}, {"LAMBDA_TASK_ROOT": "/var/task", "POWERTOOLS_TRACE_DISABLED": "true"}],
    ids=["outside Lambda", "POWERTOOLS_TRACE_DISABLED"],
)
def test_an_untraced_invocation_never_imports_the_sdk(env: dict[str, str]) -> None:
    out = run(CHILD, **env)

    assert out == {"xray_at_import": False, "results": [{"echo": 1}, {"echo": 2}], "xray_after_calls": False}


def test_a_handler_modules_building_blocks_import_neither_boto3_nor_the_sdk() -> None:
    # What a handler module needs at import (its decorators and SnapStart's hooks) leaves the AWS SDK,
    # the X-Ray SDK and litellm to the first invocation, so a handler that imports its domain there
    # costs about what a minimal Powertools Lambda does (bench/cold_imports.py).
    code = (
        "import json, sys\n"
        "from stepwise import observability, snapstart\n"
        "print(json.dumps({m: m in sys.modules for m in ('boto3', 'aws_xray_sdk', 'litellm')}))\n"
    )

    assert run(code, LAMBDA_TASK_ROOT="/var/task") == {
        "boto3": False,
        "aws_xray_sdk": False,
        "litellm": False,
    }

"""stepwise.core.tracing's choices that need no stack: the ids every Lambda derives for a run's trace, the
no-op path when no OTLP endpoint is set (no SDK import, no thread), and the OTLP/HTTP protobuf export
flushed by `observability.traced` before the handler returns.

The SDK cases run in a fresh interpreter: whether the SDK is in sys.modules, which threads run and
the process-wide tracer provider are the point. The OTLP collector is a loopback receiver here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from stepwise.core import ids, tracing
from tests.fakes.receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]
CREATED = datetime(2026, 3, 1, 12, 30, 15, 250_000, tzinfo=UTC)
RUN_ID = f"run_{ids.ulid(int(CREATED.timestamp() * 1000))}"

# A handler decorated as functions/*/app.py decorate theirs, that records one step span of a run.
CHILD = """
import json, os, sys, threading
from stepwise.core import observability, tracing
from stepwise.runs.models import Run

run = Run.model_validate({run!r})
before = threading.active_count()

@observability.traced
def handler(event, context):
    with tracing.step_span("tenant-1", run, 3) as span:
        return {{"recording": span is not None}}

out = {{"result": handler({{}}, None), "sdk": "opentelemetry.sdk" in sys.modules,
       "threads_before": before, "threads_after": threading.active_count()}}
print(json.dumps(out), flush=True)
os._exit(0)  # no atexit: the SDK's shutdown flush cannot send what the handler's flush did not
"""


def run_record(**extra: Any) -> dict[str, Any]:
    return {
        "run_id": RUN_ID,
        "agent_id": "agt_1",
        "session_id": "ses_1",
        "status": "running",
        "input": "hi",
        "created_at": CREATED.isoformat(),
        **extra,
    }


def child(code: str, **env: str) -> dict[str, Any]:
    base = {"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1", "POWERTOOLS_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**base, **env}, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_runs_trace_id_is_its_roots_creation_second_then_a_hash_of_its_id() -> None:
    trace = tracing.trace_id(RUN_ID)

    assert trace == tracing.trace_id(RUN_ID)  # every Lambda derives the same one
    assert trace >> 96 == int(CREATED.timestamp())  # X-Ray's shape: epoch seconds first
    assert trace != tracing.trace_id(f"run_{ids.ulid(int(CREATED.timestamp() * 1000))}")
    assert f"{trace:032x}"[:8] == f"{int(CREATED.timestamp()):08x}"


def test_an_id_that_is_no_ulid_still_gets_a_valid_trace_id() -> None:
    trace = tracing.trace_id("run_not-a-ulid")

    assert 0 < trace < 1 << 128 and trace == tracing.trace_id("run_not-a-ulid")
    assert tracing.span_id("run", RUN_ID) != tracing.span_id("delegation", RUN_ID)


def test_without_an_endpoint_a_traced_handler_imports_no_sdk_and_starts_no_thread() -> None:
    out = child(CHILD.format(run=run_record()))

    assert out["result"] == {"recording": False}
    assert out["sdk"] is False
    assert out["threads_after"] == out["threads_before"] == 1


def test_otel_sdk_disabled_wins_over_an_endpoint() -> None:
    out = child(
        CHILD.format(run=run_record()),
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        OTEL_SDK_DISABLED="true",
    )

    assert out["result"] == {"recording": False} and out["sdk"] is False


def test_with_an_endpoint_the_handler_exports_its_spans_over_otlp_protobuf_before_returning() -> None:
    collector = Receiver()
    try:
        out = child(
            CHILD.format(run=run_record(root_run_id=None)),
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
            AWS_LAMBDA_FUNCTION_NAME="StepFunction",
        )
        (export,) = collector.to("/v1/traces")
    finally:
        collector.close()

    assert out["result"] == {"recording": True} and out["sdk"] is True
    assert out["threads_after"] > out["threads_before"]  # the batch processor's export thread
    assert export.method == "POST" and export.headers["content-type"] == "application/x-protobuf"
    request = ExportTraceServiceRequest.FromString(export.body)
    (resource_spans,) = request.resource_spans
    resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
    assert resource["service.name"] == "stepwise" and resource["faas.name"] == "StepFunction"
    (span,) = [s for scope in resource_spans.scope_spans for s in scope.spans]
    assert span.name == "stepwise.step"
    assert span.trace_id == tracing.trace_id(RUN_ID).to_bytes(16, "big")
    # Its parent is the run's span, which the run's ending writes with this derived id.
    assert span.parent_span_id == tracing.span_id("run", RUN_ID).to_bytes(8, "big")
    attributes = {a.key: a.value for a in span.attributes}
    assert attributes["stepwise.run_id"].string_value == RUN_ID
    assert attributes["stepwise.tenant_id"].string_value == "tenant-1"
    assert attributes["stepwise.session_id"].string_value == "ses_1"
    assert attributes["stepwise.step"].int_value == 3


def test_importing_the_model_step_handler_with_an_endpoint_still_imports_no_sdk() -> None:
    # The provider is built by the first span, in an invocation: never at import (nor in a snapshot).
    code = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'functions' / 'step')!r})\n"
        "import app\n"
        "print(json.dumps({m: m in sys.modules for m in ('opentelemetry.sdk', 'litellm', 'boto3')}))\n"
    )

    loaded = child(
        code,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
        LAMBDA_TASK_ROOT="/var/task",
        AWS_LAMBDA_FUNCTION_NAME="StepFunction",
    )

    assert loaded == {"opentelemetry.sdk": False, "litellm": False, "boto3": False}


def test_a_span_that_raises_says_only_the_errors_kind_never_its_message() -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from stepwise.core.errors import ModelError
    from stepwise.runs.models import Run

    memory = InMemorySpanExporter()
    tracing.use(SimpleSpanProcessor(memory))
    run = Run.model_validate(run_record())
    try:
        # A message quoting content, as a pydantic error quotes the value it refused.
        quoted = ValueError("input_value='my card is 4111 1111 1111 1111'")
        for raised in (quoted, ModelError("said: secret")):
            try:
                with tracing.step_span("tenant-1", run, 1):
                    raise raised
            except (ValueError, ModelError):
                pass
    finally:
        tracing.reset()

    plain, coded = memory.get_finished_spans()
    assert [s.status.status_code for s in (plain, coded)] == [StatusCode.ERROR, StatusCode.ERROR]
    assert (plain.attributes or {})["error.type"] == "ValueError"
    assert (coded.attributes or {})["error.type"] == ModelError.code
    for span in (plain, coded):
        assert span.events == ()  # no exception event: its message and stack would leave with the span
        assert "4111" not in str(span.status.description) and "secret" not in str(span.status.description)

"""Logs, traces and metrics: Powertools configured in one place.

Handlers take their decorators from here (`logger`, `metrics()`, `traced`). Domain
code never touches Powertools Metrics: it says what happened through the facade at the bottom (`run_started`,
`step_taken`, ...), which records the metric and writes one structured log line. Metric names, units
and properties live here only; template.yaml's alarms and dashboard read the same names (checked by
tests/unit/test_observability.py).

Logs: every line is JSON from the `stepwise` logger (stdlib loggers named `stepwise.*` propagate into
it). Handlers `bind` tenant_id, run_id and step from their event; `bind_run` adds the run's session and
agent where the domain loads the run. Nothing here ever logs an event, a header or a value: API keys,
settings and approval tokens must not reach a log.

Metrics: CloudWatch EMF, namespace from POWERTOOLS_METRICS_NAMESPACE, the only dimension `service`
(low cardinality: tenants, agents and tools are properties, searchable in Logs Insights, never
dimensions). POWERTOOLS_METRICS_DISABLED=true (the local console) records nothing at all.

Traces: OpenTelemetry (stepwise.core.tracing), not Powertools' Tracer. That Tracer is the X-Ray SDK, in
maintenance mode with end of support on 2027-02-25; it also cost a quarter second of every handler's
import and knew nothing of runs. Instead the OpenTelemetry API and SDK write one trace per run tree
(spans per model step and tool call, GenAI semantic-convention attributes), exported by the official
OTLP/HTTP protobuf exporter through a batch processor that `traced` flushes at the end of every
invocation, when OTEL_EXPORTER_OTLP_ENDPOINT is set: in AWS the ADOT collector layer on localhost,
or an OTLP endpoint directly (X-Ray and CloudWatch take OTLP). Unset, there is no provider, no
exporter, no thread and no SDK import. Lambda's active tracing stays on in the template: the
platform's own segments (init, invoke, overhead) need no SDK in the function, and the run's spans
are in their own trace, found by the run's ids. What the X-Ray SDK patched (botocore, httpx calls as
subsegments) is not traced: spans are the run's steps and calls, not every AWS request.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

from stepwise.core import tracing

if TYPE_CHECKING:
    from stepwise.core.tracing import Run, Usage

SERVICE = "stepwise"

# Metric names, one per fact. template.yaml's alarms and dashboard use exactly these.
RUNS_STARTED = "RunsStarted"
RUNS_SUCCEEDED = "RunsSucceeded"
RUNS_FAILED = "RunsFailed"  # property `code`: the run's error code
STEPS = "Steps"
TOOL_CALLS = "ToolCalls"  # property `tool`: the tool's name
APPROVAL_WAIT_SECONDS = "ApprovalWaitSeconds"
INPUT_TOKENS = "InputTokens"
OUTPUT_TOKENS = "OutputTokens"
CACHED_TOKENS = "CachedTokens"
CACHE_WRITE_TOKENS = "CacheWriteTokens"
COST_USD = "CostUSD"  # property `tenant_id`: what each tenant's model calls cost, from litellm's price map
WEBHOOK_ATTEMPTS = "WebhookAttempts"  # property `outcome`: delivered | retrying | failed
WEBHOOK_LATENCY = "WebhookLatencyMs"  # from the event's enqueueing to the receiver's 2xx
METRIC_NAMES = frozenset(
    {
        RUNS_STARTED,
        RUNS_SUCCEEDED,
        RUNS_FAILED,
        STEPS,
        TOOL_CALLS,
        APPROVAL_WAIT_SECONDS,
        INPUT_TOKENS,
        OUTPUT_TOKENS,
        CACHED_TOKENS,
        CACHE_WRITE_TOKENS,
        COST_USD,
    }
)

logger = Logger(service=SERVICE)

# Libraries whose DEBUG lines carry payloads: Powertools' resolver logs every route's arguments ("Calling
# API Route Handler: {...}": setting values, approval tokens), botocore and pynamodb log request bodies
# and items (KMS plaintexts, task tokens, approval links in run events). Their level is pinned at INFO or
# above (what it is now, if higher), so AWS_LAMBDA_LOG_LEVEL=DEBUG, POWERTOOLS_DEBUG or an operator's
# root level cannot open them up.
PAYLOAD_LOGGERS = ("aws_lambda_powertools.event_handler", "botocore", "pynamodb")
for _name in PAYLOAD_LOGGERS:
    _payload_logger = logging.getLogger(_name)
    _payload_logger.setLevel(max(logging.INFO, _payload_logger.getEffectiveLevel()))

# Powertools keeps one metric set per process, shared by every Metrics instance: what this one records
# is flushed by the handler's `@metrics().log_metrics`, whose namespace is read when the handler loads.
_recorder = Metrics(service=SERVICE)
# In Lambda one invocation runs at a time; in the local stack many handlers share this process and
# its metric set, so a flush iterating it while another thread adds a point raised "dictionary changed
# size during iteration" (and a point added between the flush's serialising and clearing was lost).
# Adding and flushing hold this lock; uncontended in Lambda, it costs nothing there.
_metric_set_lock = threading.RLock()


Handler = Callable[[Any, Any], Any]


def traced(handler: Handler) -> Handler:
    """A handler's tracing decorator (innermost, under `log_metrics`): whatever the invocation
    recorded is exported before it returns or raises, since Lambda freezes the process right after
    and a span left in the batch processor's queue would go out with the next invocation, or never.
    Off (no OTLP endpoint), it costs a global read: the SDK is never imported."""

    @functools.wraps(handler)
    def decorated(event: Any, context: Any) -> Any:
        try:
            return handler(event, context)
        finally:
            tracing.flush()

    return decorated


class _EmfProvider(AmazonCloudWatchEMFProvider):
    """Flushes only what was recorded. An invocation that records nothing (the authorizer, a GET) is
    normal; Powertools would warn about each one."""

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None:
        with _metric_set_lock:
            if self.metric_set or raise_on_empty_metrics:
                super().flush_metrics(raise_on_empty_metrics=raise_on_empty_metrics)


def metrics() -> Metrics:
    """A handler's Metrics, for `@metrics().log_metrics`: its namespace is POWERTOOLS_METRICS_NAMESPACE as
    set when the handler module loads (Lambda sets the environment before any import). It flushes the
    process's shared metric set, where the facade below records."""
    provider = _EmfProvider(
        service=SERVICE,
        metric_set=_recorder.metric_set,
        dimension_set=_recorder.dimension_set,
        metadata_set=_recorder.metadata_set,
        default_dimensions=_recorder.default_dimensions,
    )
    return Metrics(service=SERVICE, provider=provider)


# --- Logs ---------------------------------------------------------------------------------------


def bind(**keys: Any) -> None:
    """Add `keys` to every later line of this invocation.

    Kept per thread (Powertools' thread-safe keys, a ContextVar): in Lambda that is the invocation; in the
    local stack, where every handler shares one process and runs concurrently, it keeps one invocation's
    keys off another's lines. `inject_lambda_context(clear_state=True)` resets them on every call, so a
    warm start never inherits the previous run's keys."""
    logger.thread_safe_append_keys(**{name: value for name, value in keys.items() if value is not None})


def bind_request(event: dict[str, Any], tenant_id: str | None) -> None:
    """The API's lines: the tenant the authorizer resolved and the request id as correlation_id (bound per
    thread too: the local server answers requests while runs' steps execute in the same process)."""
    from aws_lambda_powertools.logging import correlation_paths
    from aws_lambda_powertools.utilities.jmespath_utils import query

    bind(tenant_id=tenant_id, correlation_id=query(data=event, envelope=correlation_paths.API_GATEWAY_HTTP))


def bind_run(run: Run, *, step: int | None = None) -> None:
    """From here on, this invocation's lines name the run's session and agent (the step payloads carry
    only tenant, run and step; the run record is read anyway)."""
    bind(run_id=run.run_id, session_id=run.session_id, agent_id=run.agent_id, step=step)


# --- Metrics facade -----------------------------------------------------------------------------


def _add(name: str, value: float, unit: MetricUnit = MetricUnit.Count) -> None:
    """Into the invocation's metric set, flushed when the handler returns."""
    if not is_metrics_disabled():  # disabled, Powertools would keep accumulating and flush at 100 values
        with _metric_set_lock:
            _recorder.add_metric(name=name, unit=unit, value=value)


def _emit(name: str, value: float, unit: MetricUnit = MetricUnit.Count, **properties: str) -> None:
    """A data point with properties goes out at once in its own EMF document, so its properties describe
    it alone (the invocation's shared set has one value per property name)."""
    if is_metrics_disabled():
        return
    document = AmazonCloudWatchEMFProvider(service=SERVICE)  # namespace from the environment, as above
    document.add_metric(name=name, unit=unit, value=value)
    for key, prop in properties.items():
        document.add_metadata(key=key, value=prop)
    document.flush_metrics()


def run_started(run: Run) -> None:
    """The run's execution (or, for a sync run, its model step) was started."""
    _add(RUNS_STARTED, 1)
    logger.info("run started", extra={"run_id": run.run_id, "session_id": run.session_id})


def run_succeeded() -> None:
    _add(RUNS_SUCCEEDED, 1)
    logger.info("run succeeded")


def run_failed(code: str) -> None:
    _emit(RUNS_FAILED, 1, code=code)
    logger.info("run failed", extra={"code": code})


def step_taken(usage: Usage, tenant_id: str) -> None:
    """One model call, the tokens it spent and, when its model has a price, what it cost the tenant."""
    _add(STEPS, 1)
    _add(INPUT_TOKENS, usage.input_tokens)
    _add(OUTPUT_TOKENS, usage.output_tokens)
    _add(CACHED_TOKENS, usage.cached_tokens)
    _add(CACHE_WRITE_TOKENS, usage.cache_write_tokens)
    if usage.cost_usd is not None:
        _emit(COST_USD, usage.cost_usd, MetricUnit.NoUnit, tenant_id=tenant_id)
    spent = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cached_tokens": usage.cached_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cost_usd": usage.cost_usd,
    }
    logger.info("model step", extra={"usage": spent})


def tool_called(tool_name: str) -> None:
    """A tool call is about to execute (counted like `tools_executed`: before it acts)."""
    _emit(TOOL_CALLS, 1, tool=tool_name)
    logger.info("tool call", extra={"tool": tool_name})


def answered(kind: str, created_at: datetime, answered_at: datetime | None) -> None:
    """An interaction was answered. For an approval, the time it waited for a human (created_at →
    answered_at); a client tool's answer comes from software and is not a human's wait."""
    if kind != "approval" or answered_at is None:
        return
    waited = max((answered_at - created_at).total_seconds(), 0.0)
    _add(APPROVAL_WAIT_SECONDS, waited, MetricUnit.Seconds)
    logger.info("approval decided", extra={"waited_seconds": waited})


def webhook_attempted(outcome: str, *, attempts: int, latency_ms: int | None) -> None:
    """A webhook delivery attempt ended `outcome`; `latency_ms` (delivered only) runs from when its
    event was queued to the receiver's answer, retries included."""
    _emit(WEBHOOK_ATTEMPTS, 1, outcome=outcome)
    if latency_ms is not None:
        _add(WEBHOOK_LATENCY, latency_ms, MetricUnit.Milliseconds)
    logger.info("webhook attempt", extra={"outcome": outcome, "attempts": attempts, "latency_ms": latency_ms})

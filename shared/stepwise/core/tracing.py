"""Traces of runs: OpenTelemetry spans, exported over OTLP/HTTP (protobuf) when
OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set, nothing at all otherwise.

One trace per run tree. Its id is derived from the root run's id, so every Lambda invocation of a run
(Step, Await, Failed, the API's cancel, the reconciler) and of its delegated children joins the same
trace without carrying a context through the state machine. The first 32 bits are the root run's
creation time in epoch seconds (its ULID's), the rest a hash: the shape X-Ray's own ids have, so the
X-Ray/CloudWatch OTLP endpoint takes it as a native trace id.

    invoke_agent <agent>      the run, emitted when it ends (start: its creation), id from its run_id
      stepwise.step           one Step invocation (stepwise.step = the model step it takes)
        chat <model>          one model call (GenAI attributes, token counts)
        execute_tool <name>   one tool call (name, call id); a delegation's span is the parent of
          invoke_agent <child>  ... its child run's span (ids derived from the interaction)
      stepwise.await          one Await invocation (the wait's kind)

    invoke_workflow <workflow>  a workflow run (as a workflow tool's call: its child, as a delegated run)
      workflow_node <node>      one node's execution, written when it ends (its key's ids)
        invoke_agent <agent>    ... the node's run, whose spans are as above

Every span carries stepwise.tenant_id, run_id, session_id, agent_id and step. Nothing here records an
argument, a result, a prompt or an answer: spans may leave the account, content must not.

Off (no endpoint and no `use()`), every helper is a null context manager and nothing of the SDK is
imported: the model step's import and each call pay a dictionary lookup. On, the provider is built on
the first span, in the invocation (never in a SnapStart snapshot: its export thread would not survive
a restore), and installed as the global provider so the MCP SDK's client spans join ours.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from stepwise.core import ids

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Span, Tracer

SERVICE = "stepwise"
SCOPE = "stepwise"
# What one flush may take at the end of an invocation: an unreachable collector must not hold the
# Lambda until its timeout (the exporter's own request timeout is OTEL_EXPORTER_OTLP_TIMEOUT, 10 s).
FLUSH_TIMEOUT_MS = 5_000
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")  # the shape of our errors' stable codes (stepwise.core.errors)


class Run(Protocol):
    """What traces and logs read of a run. Structural, so core names no model of the packages above it
    (stepwise.runs.models.Run is one)."""

    @property
    def run_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def created_at(self) -> datetime: ...
    @property
    def parent_run_id(self) -> str | None: ...
    @property
    def root_run_id(self) -> str | None: ...
    @property
    def parent_interaction_id(self) -> str | None: ...
    @property
    def trigger_id(self) -> str | None: ...


class Usage(Protocol):
    """What a model call spent, as traces and metrics read it (stepwise.llm.models.Usage is one)."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...
    @property
    def cache_write_tokens(self) -> int: ...
    @property
    def cost_usd(self) -> float | None: ...


# litellm's provider names → the GenAI conventions' gen_ai.provider.name (others are passed as they are).
PROVIDERS = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "bedrock_converse": "aws.bedrock",
    "vertex_ai": "gcp.vertex_ai",
    "vertex_ai_beta": "gcp.vertex_ai",
    "gemini": "gcp.gemini",
    "mistral": "mistral_ai",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "groq": "groq",
    "deepseek": "deepseek",
    "perplexity": "perplexity",
    "xai": "x_ai",
    "watsonx": "ibm.watsonx.ai",
}


@dataclass
class _Tracing:
    provider: TracerProvider
    tracer: Tracer


_lock = threading.Lock()
_active: _Tracing | None = None
_decided = False
# The ids the next span must take (trace, span), set only around one `start_span` (see _RunIds).
_pinned: ContextVar[tuple[int, int] | None] = ContextVar("stepwise_pinned_span", default=None)


def _current() -> _Tracing | None:
    global _active, _decided
    if not _decided:
        with _lock:
            if not _decided:
                _active = _from_environment()
                _decided = True
    return _active


def enabled() -> bool:
    return _current() is not None


def _from_environment() -> _Tracing | None:
    from stepwise.core import config  # pydantic loads on the first call, not with the handler module

    if not config.telemetry().exports:
        return None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Batch, not Simple: a simple processor posts each span as it ends, a round trip inside every
    # tool call and model step; the batch one queues them and `flush()` exports the invocation's
    # spans in one request before Lambda freezes the process. The exporter reads the endpoint,
    # headers, timeout and compression from the standard OTEL_EXPORTER_OTLP_* variables.
    tracing = _build(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(tracing.provider)  # the MCP SDK's spans (and its traceparent) join ours
    return tracing


def _build(processor: SpanProcessor) -> _Tracing:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    from stepwise.core import config

    class _RunIds(RandomIdGenerator):
        """Random ids, except for the span being started under `_pinned`: a run's own span and a
        delegation's, whose ids other invocations derive from the run's ids instead of being told."""

        def generate_span_id(self) -> int:
            pinned = _pinned.get()
            return pinned[1] if pinned is not None else super().generate_span_id()

        def generate_trace_id(self) -> int:
            pinned = _pinned.get()
            return pinned[0] if pinned is not None else super().generate_trace_id()

    attributes: dict[str, Any] = {"service.name": config.telemetry().service_name or SERVICE}
    platform = config.platform()
    if platform.function_name:
        attributes |= {
            "cloud.provider": "aws",
            "cloud.platform": "aws_lambda",
            "cloud.region": platform.region,
            "faas.name": platform.function_name,
            "faas.version": platform.function_version,
        }
    provider = TracerProvider(resource=Resource.create(attributes), id_generator=_RunIds())
    provider.add_span_processor(processor)
    return _Tracing(provider=provider, tracer=provider.get_tracer(SCOPE))


def use(processor: SpanProcessor) -> None:
    """Trace into `processor` from now on, whatever the environment says (tests: an in-memory exporter)."""
    global _active, _decided
    with _lock:
        _active, _decided = _build(processor), True


def reset() -> None:
    """Forget the provider: the next span decides again from the environment."""
    global _active, _decided
    with _lock:
        if _active is not None:
            _active.provider.shutdown()
        _active, _decided = None, False


def flush() -> None:
    """Export what this invocation recorded; called as each handler returns (Lambda then freezes the
    process, and a span still queued would leave only with the next invocation, or never)."""
    if _active is not None:
        _active.provider.force_flush(FLUSH_TIMEOUT_MS)


# --- Ids ------------------------------------------------------------------------------------------


def trace_id(root_run_id: str) -> int:
    """The run tree's trace id: the root run's creation second, then 96 bits of its id's hash."""
    digest = hashlib.sha256(f"stepwise-trace\x1f{root_run_id}".encode()).digest()
    created_ms = ids.ulid_ms(root_run_id.rsplit("_", 1)[-1])
    if created_ms is None:  # not an id we issued: all 128 bits from the hash
        return int.from_bytes(digest[:16], "big") or 1
    return ((created_ms // 1000) & 0xFFFFFFFF) << 96 | int.from_bytes(digest[:12], "big")


def span_id(*key: str) -> int:
    digest = hashlib.sha256("\x1f".join(("stepwise-span", *key)).encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _run_trace(run: Run) -> int:
    return trace_id(run.root_run_id or run.run_id)


def _remote(trace: int, span: int) -> Context:
    from opentelemetry import trace as api
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    parent = SpanContext(
        trace_id=trace, span_id=span, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
    )
    return api.set_span_in_context(NonRecordingSpan(parent))


def _in_run(run: Run) -> Context:
    """The run's span as the parent, though it is written only when the run ends."""
    return _remote(_run_trace(run), span_id("run", run.run_id))


def _attributes(tenant_id: str, run: Run, step: int | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "stepwise.tenant_id": tenant_id,
        "stepwise.run_id": run.run_id,
        "stepwise.session_id": run.session_id,
        "stepwise.agent_id": run.agent_id,
    }
    if step is not None:
        attributes["stepwise.step"] = step
    if run.root_run_id:
        attributes["stepwise.root_run_id"] = run.root_run_id
    return attributes


@contextlib.contextmanager
def _span(
    tracing: _Tracing,
    name: str,
    attributes: dict[str, Any],
    *,
    context: Context | None = None,
    kind: str = "INTERNAL",
    pinned: tuple[int, int] | None = None,
    start: datetime | None = None,
) -> Iterator[Span]:
    from opentelemetry import trace as api
    from opentelemetry.trace import SpanKind

    token = _pinned.set(pinned)
    try:
        span = tracing.tracer.start_span(
            name,
            context=context,
            kind=SpanKind[kind],
            attributes=attributes,
            start_time=int(start.timestamp() * 1e9) if start is not None else None,
        )
    finally:
        _pinned.reset(token)
    # Current for what runs inside (threads get it through their contextvars copy), and marked as an
    # error when what runs inside raises: by the exception's class (or its stable code) only. Not
    # `record_exception`: an exception's message and stack are text nobody vetted (a pydantic error
    # quotes the value it refused, a provider's error the request it refused), and content must not
    # leave in a span.
    with api.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
        try:
            yield span
        except BaseException as exc:
            from opentelemetry.trace import Status, StatusCode

            code = getattr(exc, "code", None)
            kind = code if isinstance(code, str) and _CODE.fullmatch(code) else type(exc).__qualname__
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, kind))
            raise


# --- Spans ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def step_span(tenant_id: str, run: Run, step: int) -> Iterator[Span | None]:
    """One Step invocation of `run`, taking model step `step`."""
    tracing = _current()
    if tracing is None:
        yield None
        return
    with _span(tracing, "stepwise.step", _attributes(tenant_id, run, step), context=_in_run(run)) as span:
        yield span


@contextlib.contextmanager
def await_span(tenant_id: str, run: Run, step: int, kind: str) -> Iterator[Span | None]:
    """One Await invocation: the run starts waiting on a human, the app or a child run."""
    tracing = _current()
    if tracing is None:
        yield None
        return
    attributes = {**_attributes(tenant_id, run, step), "stepwise.wait.kind": kind}
    with _span(tracing, "stepwise.await", attributes, context=_in_run(run)) as span:
        yield span


@contextlib.contextmanager
def chat_span(tenant_id: str, run: Run, step: int, model: str, provider: str | None) -> Iterator[Span | None]:
    """One model call (GenAI semantic conventions: operation `chat`, a CLIENT span); `record_turn`
    adds what the answer tells."""
    tracing = _current()
    if tracing is None:
        yield None
        return
    attributes = {
        **_attributes(tenant_id, run, step),
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
    }
    if provider:
        name = PROVIDERS.get(provider, provider)
        attributes |= {"gen_ai.provider.name": name, "gen_ai.system": name}  # the latter: older readers
    with _span(tracing, f"chat {model}", attributes, kind="CLIENT") as span:
        yield span


def record_turn(
    span: Span | None, *, response_model: str | None, usage: Usage, finish_reason: str | None
) -> None:
    if span is None:
        return
    if response_model:
        span.set_attribute("gen_ai.response.model", response_model)
    span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    if usage.cached_tokens:
        span.set_attribute("gen_ai.usage.cache_read.input_tokens", usage.cached_tokens)
    if usage.cache_write_tokens:
        span.set_attribute("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens)
    if finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])


@contextlib.contextmanager
def tool_span(
    tenant_id: str, run: Run, step: int, name: str, call_id: str, *, delegation: str | None = None
) -> Iterator[Span | None]:
    """One tool call (operation `execute_tool`). For a delegation, `delegation` is its interaction's
    id: the span's id is derived from it, so the child run's span can name it as its parent."""
    tracing = _current()
    if tracing is None:
        yield None
        return
    attributes = {
        **_attributes(tenant_id, run, step),
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
    }
    pinned = (_run_trace(run), span_id("delegation", delegation)) if delegation else None
    with _span(tracing, f"execute_tool {name}", attributes, pinned=pinned) as span:
        yield span


def tool_failed(span: Span | None, code: str) -> None:
    """The call answered with an error result (the tool ran, or was refused, and said why)."""
    if span is None:
        return
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", code)
    span.set_status(Status(StatusCode.ERROR, code))


def run_ended(tenant_id: str, run: Run, status: str, *, usage: Usage, error_code: str | None) -> None:
    """The run's own span, written once when it ends: from its creation to now, with the ids every
    invocation of it used as their parent. A delegated child's parent is its delegation's span."""
    tracing = _current()
    if tracing is None:
        return
    from opentelemetry.context import Context
    from opentelemetry.trace import Status, StatusCode

    attributes = {
        **_attributes(tenant_id, run, None),
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.id": run.agent_id,
        "gen_ai.conversation.id": run.session_id,
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "stepwise.status": status,
    }
    if run.parent_run_id:
        attributes["stepwise.parent_run_id"] = run.parent_run_id
    trigger = run.trigger_id or ""
    operation = "invoke_agent"
    if trigger.startswith(WORKFLOW_TRIGGER):  # a workflow run: agent_id holds the workflow's id
        version = trigger.removeprefix(WORKFLOW_TRIGGER).partition("@")[2]
        operation = "invoke_workflow"
        attributes |= {"gen_ai.operation.name": operation, "stepwise.workflow_version": int(version or 0)}
        attributes["stepwise.workflow_id"] = attributes.pop("gen_ai.agent.id")
    trace = _run_trace(run)
    if run.parent_interaction_id:
        parent = _remote(trace, span_id("delegation", run.parent_interaction_id))
    elif trigger.startswith(NODE_TRIGGER) and run.parent_run_id:  # a workflow node's run: its node's
        parent = _remote(trace, span_id("node", run.parent_run_id, node_key(trigger)))
    else:
        parent = Context()  # a root, whatever span is current (the Step that ends it is its child)
    pinned = (trace, span_id("run", run.run_id))
    with _span(
        tracing,
        f"{operation} {run.agent_id}",
        attributes,
        context=parent,
        pinned=pinned,
        start=run.created_at,
    ) as span:
        if error_code is not None and status != "cancelled":
            span.set_attribute("error.type", error_code)
            span.set_status(Status(StatusCode.ERROR, error_code))


# A workflow run's trigger id is `workflow:<workflow_id>@<version>`; its node runs' are
# `workflow-node:<origin run>/<node key>` (stepwise.workflows.running).
WORKFLOW_TRIGGER = "workflow:"
NODE_TRIGGER = "workflow-node:"


def node_key(trigger_id: str) -> str:
    """A node run's node key, from its trigger id."""
    return trigger_id.removeprefix(NODE_TRIGGER).partition("/")[2]


def node_ended(
    tenant_id: str,
    workflow_run: Run,
    key: str,
    node_id: str,
    status: str,
    *,
    start: datetime,
    error_code: str | None = None,
    reused: bool = False,
) -> None:
    """One node of a workflow run, written when it ends: a child of the workflow run's span, from the
    node's start to now. Its id is derived from the run and the node's key, so the node's own run (an
    agent node's) names it as its parent without being told."""
    tracing = _current()
    if tracing is None:
        return
    from opentelemetry.trace import Status, StatusCode

    attributes = {
        **_attributes(tenant_id, workflow_run, None),
        "stepwise.node_id": node_id,
        "stepwise.node_key": key,
        "stepwise.status": status,
        "stepwise.reused": reused,
    }
    pinned = (_run_trace(workflow_run), span_id("node", workflow_run.run_id, key))
    with _span(
        tracing,
        f"workflow_node {node_id}",
        attributes,
        context=_in_run(workflow_run),
        pinned=pinned,
        start=start,
    ) as span:
        if error_code is not None:
            span.set_attribute("error.type", error_code)
            span.set_status(Status(StatusCode.ERROR, error_code))

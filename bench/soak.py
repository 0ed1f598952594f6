"""`python -m bench soak`: many runs at once through the local stack while its seams fail, then the
invariants of issue 30 checked over what the fake servers saw and what the API says.

N runs (STEPWISE_SOAK_RUNS, default 300) of mixed kinds are started over real HTTP from an async client
(the SDK's) that keeps at most CONCURRENCY runs in flight. Faults are drawn from a seeded generator per
class, at the rates in `Rates`: the sequence of decisions is the seed's, but which request meets which
decision depends on how the threads interleave, so two soaks with one seed inject the same faults in
about the same places, not the same ones.

Seams (all in this process; `Faults.install` puts them in and `remove` takes them out):
- DynamoDB, at botocore (in front of moto's stubber): throttling (ProvisionedThroughputExceeded,
  ThrottlingException), a 500, and a read timeout after moto applied the request. Only a request's
  first attempt is faulted, so botocore's retries see the outcome the service would give next.
- Lambda (the Step function): the handler dies mid-step (at one of its DynamoDB calls, after the call
  was applied) or after an HTTP tool's request went out and before its result was saved (Lambda
  reports Runtime.ExitError); or it succeeds and the answer is lost (Lambda.ServiceException, which
  the ASL retries with the same input: Step Functions' "retried after a success").
- The model (the scripted provider): 429, 500, a stream cut halfway, a first token so slow the call
  times out (raised as litellm.Timeout at once: the client's clock, not ours).
- The tool server: 500 without doing the work, or doing it and dropping the connection unanswered (a
  timeout's outcome without its 30 s); the webhook receiver is down (503) for its first deliveries;
  SQS delivers some batches twice.

After the last run ends, faults are removed, the reconciler sweeps, and the seven invariants are read.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import random
import re
import statistics
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from bench.harness import Section

DEFAULT_RUNS = 300
CONCURRENCY = 48
SEED = 30
KINDS = (
    "plain",
    "attachment",
    "http_tool",
    "parallel_reads",
    "send_email",
    "approval",
    "client_tool",
    "delegation",
    "memory",
    "cancel",
)
TAG = re.compile(r"soak-[0-9a-f]{6}-\d+(?:\.c\d)*")
EXAMPLES = 5  # violations quoted per invariant
RUN_DEADLINE = 600.0  # seconds the client follows one run (and its replay) before it stops waiting


@dataclass(frozen=True)
class Rates:
    """The share of each seam's requests that fail, per fault class."""

    ddb_throttle: float = 0.02
    ddb_500: float = 0.01
    ddb_timeout_after_apply: float = 0.01
    step_dies_mid_step: float = 0.02
    step_dies_after_tool_request: float = 0.04
    step_answer_lost: float = 0.03
    model_429: float = 0.04
    model_500: float = 0.03
    model_cut_stream: float = 0.02
    model_slow_first_token: float = 0.02
    tool_500: float = 0.05
    tool_applied_then_dropped: float = 0.04
    webhook_down_first: int = 15  # deliveries answered 503 before the receiver is back
    sqs_twice: float = 0.25


class Killed(BaseException):
    """The Lambda process dying: not an Exception, so nothing in the handler catches it."""


# --- Fake servers ----------------------------------------------------------------------------------


class Peer:
    """The soak's tool endpoints (/effect, /read, /send_email) and webhook receiver (/hook): records what
    each request did, and fails as the faults say."""

    def __init__(self, faults: Faults) -> None:
        self.lock = threading.Lock()
        self.effects: dict[str, set[str]] = defaultdict(set)  # call tag → Idempotency-Keys applied
        self.effect_requests: Counter[str] = Counter()  # call tag → requests that applied the work
        self.reads: Counter[str] = Counter()
        self.emails: Counter[tuple[str, str]] = Counter()  # (to, body) → applied, keys deduplicated
        self.email_keys: dict[tuple[str, str], set[str]] = defaultdict(set)
        self.hooks: list[dict[str, Any]] = []
        self.hook_refusals = 0
        peer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0]
                if path == "/hook":
                    with peer.lock:
                        down = peer.hook_refusals < faults.rates.webhook_down_first
                        if down:
                            peer.hook_refusals += 1
                            faults.count("webhook_down")
                        else:
                            peer.hooks.append(body)
                    self._answer(503 if down else 204, None)
                    return
                fault = faults.draw("tool", ("tool_500", "tool_applied_then_dropped"))
                if fault == "tool_500":
                    self._answer(500, {"error": "injected"})
                    return
                key = self.headers.get("Idempotency-Key") or ""
                with peer.lock:
                    if path == "/effect":
                        peer.effects[str(body.get("q"))].add(key)
                        peer.effect_requests[str(body.get("q"))] += 1
                    elif path == "/send_email":
                        mail = (str(body.get("to")), str(body.get("body")))
                        if key not in peer.email_keys[mail]:  # a provider dedupes by its idempotency key
                            peer.emails[mail] += 1
                        peer.email_keys[mail].add(key)
                    else:
                        peer.reads[str(body.get("q"))] += 1
                if fault == "tool_applied_then_dropped":
                    self.close_connection = True
                    self.connection.shutdown(2)  # applied, never answered: the caller cannot know
                    return
                self._answer(200, {"ok": True, "q": body.get("q")})

            def _answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 512

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="soak-peer").start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- Faults -----------------------------------------------------------------------------------------


class Faults:
    def __init__(self, rates: Rates, seed: int) -> None:
        self.rates = rates
        self.on = False
        self._lock = threading.Lock()
        self._rngs: dict[str, random.Random] = {}
        self._seed = seed
        self.injected: Counter[str] = Counter()
        self.model_calls: dict[str, list[dict[str, Any]]] = defaultdict(list)  # tag → usage of answered calls
        # tag → usage of answered calls whose Step was killed before it ended: paid, and recorded only if
        # the process died after the step's write of it (a real Lambda killed mid-stream never learns it)
        self.died_calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.model_faults: Counter[str] = Counter()  # tag → model faults its calls met
        self.killed_tags: set[str] = set()
        self.prefix = ""  # the soak's run tags begin with it (Soak sets it)
        self._local = threading.local()
        self._undo: list[Callable[[], None]] = []

    def count(self, name: str) -> None:
        with self._lock:
            self.injected[name] += 1

    def draw(self, seam: str, classes: tuple[str, ...]) -> str | None:
        """One decision from the seam's own generator: a fault class, or None."""
        if not self.on:
            return None
        with self._lock:
            rng = self._rngs.setdefault(seam, random.Random(f"{self._seed}/{seam}"))
            roll = rng.random()
            for name in classes:
                rate = float(getattr(self.rates, name))
                if roll < rate:
                    self.injected[name] += 1
                    return name
                roll -= rate
        return None

    def install(self, stack: Any) -> None:
        self._undo += [self._dynamodb(), self._lambda(stack), self._tools(), self._model(), self._sqs(stack)]

    def remove(self) -> None:
        self.on = False
        while self._undo:
            self._undo.pop()()

    # DynamoDB at botocore: in front of moto's stubber, which answers every request in process.
    def _dynamodb(self) -> Callable[[], None]:
        from botocore.awsrequest import AWSResponse
        from botocore.exceptions import ReadTimeoutError
        from moto.core.botocore_stubber import BotocoreStubber, MockRawResponse

        original = BotocoreStubber.__call__
        faults = self

        def call(stubber: Any, event_name: str, request: Any, **kwargs: Any) -> Any:
            if "dynamodb." not in str(request.url) or not faults.on:
                return original(stubber, event_name, request, **kwargs)
            if (request.context.get("retries") or {}).get("attempt", 1) > 1:
                return original(stubber, event_name, request, **kwargs)
            fault = faults.draw("dynamodb", ("ddb_throttle", "ddb_500", "ddb_timeout_after_apply"))
            if fault == "ddb_throttle":
                kind = random.Random(faults.injected["ddb_throttle"]).choice(
                    ("ProvisionedThroughputExceededException", "ThrottlingException")
                )
                body = json.dumps(
                    {"__type": f"com.amazonaws.dynamodb.v20120810#{kind}", "message": "injected"}
                )
                return AWSResponse(request.url, 400, {}, MockRawResponse(body))
            if fault == "ddb_500":
                body = json.dumps(
                    {"__type": "com.amazon.coral.service#InternalFailure", "message": "injected"}
                )
                return AWSResponse(request.url, 500, {}, MockRawResponse(body))
            response = original(stubber, event_name, request, **kwargs)
            if fault == "ddb_timeout_after_apply":
                raise ReadTimeoutError(endpoint_url=str(request.url))  # applied; the answer is lost
            faults._maybe_die_here()
            return response

        BotocoreStubber.__call__ = call  # type: ignore[method-assign]

        def undo() -> None:
            BotocoreStubber.__call__ = original  # type: ignore[method-assign]

        return undo

    def _maybe_die_here(self) -> None:
        left = getattr(self._local, "die_after", None)
        if left is None:
            return
        if left <= 0:
            self._local.die_after = None
            raise Killed("the step's process died after a DynamoDB call was applied")
        self._local.die_after = left - 1

    # The Step function: dies mid-step, or succeeds and its answer is lost (the ASL retries it).
    def _lambda(self, stack: Any) -> Callable[[], None]:
        from stepwise_local.lambdas import FunctionError

        lambdas = stack.lambdas
        previous = lambdas.__dict__.get("invoke")
        inner = lambdas.invoke
        faults = self

        def invoke(name_or_arn: str, event: Any) -> Any:
            if lambdas.logical_id(name_or_arn) != "StepFunction" or not faults.on:
                return inner(name_or_arn, event)
            fault = faults.draw("step", ("step_dies_mid_step", "step_answer_lost"))
            if fault == "step_dies_mid_step":
                faults._local.die_after = random.Random(str(event)).randrange(1, 12)
            outer, faults._local.calls = getattr(faults._local, "calls", None), []  # this invocation's calls
            calls = faults._local.calls
            ended = "answered"
            try:
                result = inner(name_or_arn, event)
            except Killed as exc:
                ended = "killed"
                faults._note_killed(event, calls)
                raise FunctionError({"errorType": "Runtime.ExitError", "errorMessage": str(exc)}) from None
            except FunctionError as exc:
                ended = f"raised {str(exc)[:160]}"
                raise
            finally:
                faults._local.die_after = None
                faults._local.calls = outer
                for _, usage in calls:  # each call says how the Step that made it ended (for the report)
                    usage["step"] = f"{ended}{', answer lost' if fault == 'step_answer_lost' else ''}"
            if fault == "step_answer_lost":
                raise FunctionError({"errorType": "Lambda.ServiceException", "errorMessage": "injected"})
            return result

        lambdas.invoke = invoke

        def undo() -> None:
            if previous is None:
                del lambdas.invoke
            else:
                lambdas.invoke = previous

        return undo

    def _note_killed(self, event: Any, calls: list[tuple[str, dict[str, Any]]]) -> None:
        with self._lock:
            self.killed_tags.add(str((event or {}).get("run_id")))
            for tag, usage in calls:
                self.died_calls[tag].append(usage)

    def _answered(self, tag: str, usage: dict[str, Any]) -> None:
        with self._lock:
            self.model_calls[tag].append(usage)
        calls = getattr(self._local, "calls", None)
        if calls is not None:
            calls.append((tag, usage))

    # After an HTTP tool's request went out, before the step saved its result.
    def _tools(self) -> Callable[[], None]:
        from stepwise.tools import registry
        from stepwise.tools.models import HttpTool

        original = registry.run
        faults = self

        def run(tool: Any, arguments: dict[str, Any], **kwargs: Any) -> Any:
            result = original(tool, arguments, **kwargs)
            dies = isinstance(tool, HttpTool) and not tool.read_only
            if dies and faults.draw("tool_process", ("step_dies_after_tool_request",)):
                raise Killed("the step's process died after the tool's request went out")
            return result

        registry.run = run  # type: ignore[assignment]

        def undo() -> None:
            registry.run = original  # type: ignore[assignment]

        return undo

    # The model: the scripted provider, counted as the provider would bill it.
    def _model(self) -> Callable[[], None]:
        import litellm

        from stepwise.llm import scripted

        original_stream, original_complete = scripted.ScriptedLLM.streaming, scripted.ScriptedLLM.completion
        faults = self

        def tag_of(kwargs: dict[str, Any]) -> str | None:
            """The run tag of the soak's run a call serves ("?" for a leaf, whose message is the
            middle's fixed script), or None for a call of another run in the same stack (a test's
            left-over run in `make test`), which the soak neither faults nor counts."""
            users = [m for m in kwargs.get("messages") or [] if m.get("role") == "user"]
            text = scripted._text(users[0].get("content")) if users else ""
            found = TAG.search(text)
            if found is not None and found.group(0).startswith(f"{faults.prefix}-"):
                return found.group(0)
            return "?" if faults.prefix and faults.prefix in text else None

        def fail(fault: str | None, tag: str) -> None:
            if fault is None:
                return
            with faults._lock:
                faults.model_faults[tag] += 1
            model = "scripted/soak"
            if fault == "model_429":
                raise litellm.RateLimitError("injected 429", llm_provider="scripted", model=model)
            if fault == "model_500":
                raise litellm.InternalServerError("injected 500", llm_provider="scripted", model=model)
            if fault == "model_slow_first_token":
                raise litellm.Timeout(
                    "injected: no first token in time", model=model, llm_provider="scripted"
                )

        def streaming(llm: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
            tag = tag_of(kwargs)
            if tag is None:
                return original_stream(llm, *args, **kwargs)
            fault = faults.draw(
                "model", ("model_429", "model_500", "model_slow_first_token", "model_cut_stream")
            )
            fail(fault if fault != "model_cut_stream" else None, tag)
            chunks = list(original_stream(llm, *args, **kwargs))
            if fault == "model_cut_stream":
                return _cut(chunks[: max(1, len(chunks) // 2)])
            usage = chunks[-1].get("usage") or {}
            faults._answered(
                tag,
                {
                    "input": int(usage.get("prompt_tokens", 0)),
                    "output": int(usage.get("completion_tokens", 0)),
                },
            )
            return iter(chunks)

        def completion(llm: Any, *args: Any, **kwargs: Any) -> Any:
            tag = tag_of(kwargs)
            if tag is None:
                return original_complete(llm, *args, **kwargs)
            fail(faults.draw("model", ("model_429", "model_500", "model_slow_first_token")), tag)
            response = original_complete(llm, *args, **kwargs)
            faults._answered(
                tag, {"input": response.usage.prompt_tokens, "output": response.usage.completion_tokens}
            )
            return response

        scripted.ScriptedLLM.streaming = streaming  # type: ignore[method-assign]
        scripted.ScriptedLLM.completion = completion  # type: ignore[method-assign]

        def undo() -> None:
            scripted.ScriptedLLM.streaming = original_stream  # type: ignore[method-assign]
            scripted.ScriptedLLM.completion = original_complete  # type: ignore[method-assign]

        return undo

    def _sqs(self, stack: Any) -> Callable[[], None]:
        queues = stack.queues
        inner = queues._invoke
        faults = self

        def invoke(name: str, event: Any) -> Any:
            result = inner(name, event)
            if faults.draw("sqs", ("sqs_twice",)):
                inner(name, event)  # the same batch again, as SQS's at-least-once delivery may
            return result

        queues._invoke = invoke

        def undo() -> None:
            queues._invoke = inner

        return undo


def _agent_tool(name: str, agent_id: str) -> dict[str, Any]:
    return {"type": "agent", "name": name, "description": f"{name}.", "agent_id": agent_id}


def _cut(chunks: list[Any]) -> Iterator[Any]:
    import litellm

    yield from chunks
    raise litellm.APIConnectionError(
        "injected: the stream was cut", llm_provider="scripted", model="scripted/soak"
    )


# --- The client ------------------------------------------------------------------------------------


class Recording(httpx.AsyncBaseTransport):
    """Every response the API gave the client, for invariant 6."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=256))
        self.statuses: Counter[int] = Counter()
        self.bad: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        self.statuses[response.status_code] += 1
        if response.status_code >= 500:
            await response.aread()
            retryable = response.status_code == 503 and (
                "retry-after" in response.headers or b'"unavailable"' in response.content
            )
            if not retryable:
                self.bad.append(
                    f"{request.method} {request.url.path} {response.status_code} {response.text[:200]}"
                )
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Planned:
    index: int
    kind: str
    tag: str
    agent: str
    script: list[dict[str, Any]]
    effects: list[str] = field(default_factory=list)  # call tags of effectful HTTP calls
    emails: list[tuple[str, str]] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    planned: Planned
    run_id: str | None = None
    started: float = 0.0
    first_event: float | None = None
    terminal: float | None = None
    status: str | None = None
    replay_id: str | None = None
    client_error: str | None = None
    over: float | None = None  # when the client was done with it (its replay included)


class Soak:
    def __init__(self, stack: Any, runs: int, seed: int, rates: Rates, concurrency: int) -> None:
        self.stack, self.runs, self.seed, self.concurrency = stack, runs, seed, concurrency
        self.faults = Faults(rates, seed)
        self.prefix = f"soak-{hashlib.sha256(f'{seed}{uuid.uuid4()}'.encode()).hexdigest()[:6]}"
        self.faults.prefix = self.prefix
        self.tenant = f"soak{self.prefix[5:]}"
        self.key = f"sk-{self.prefix}"
        self.peer = Peer(self.faults)
        self.agents: dict[str, str] = {}

    # Agents: one per kind, in a tenant of the soak's own, so its quota counter is the soak's alone.
    def _agents(self) -> None:
        from stepwise.store import keys

        keys.store_key(self.key, self.tenant)
        status, _, secret = self.stack.invoke_api("POST", "/v1/webhooks/secret", {}, key=self.key)
        if status not in (200, 201):
            raise RuntimeError(f"soak webhook secret: {status} {secret}")
        url = self.peer.url
        schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

        def http(name: str, path: str, **extra: Any) -> dict[str, Any]:
            return {
                "type": "http",
                "name": name,
                "description": f"{name} tool",
                "input_schema": schema,
                "endpoint": f"{url}{path}",
                **extra,
            }

        email = {
            "type": "http",
            "name": "send_email",
            "description": "Send an email.",
            "input_schema": {
                "type": "object",
                "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
                "required": ["to", "body"],
            },
            "endpoint": f"{url}/send_email",
            "effect": "idempotent",
            "key_fields": ["to"],
        }
        self.agents["leaf"] = self._create({"name": "leaf"})
        # A child's message is its parent's argument; the middle's own script is fixed, so the leaves'
        # model calls carry no run's tag (invariant 5 sums them together).
        self.agents["middle"] = self._create(
            {
                "name": "middle",
                "tools": [_agent_tool("ask_leaf", self.agents["leaf"])],
                "script": [
                    {
                        "tool_calls": [
                            {"name": "ask_leaf", "arguments": {"message": f"a leaf of {self.prefix}"}}
                        ]
                    },
                    {"text": "mid"},
                ],
            }
        )
        self.agents["top"] = self._create(
            {"name": "top", "tools": [_agent_tool("ask_middle", self.agents["middle"])]}
        )
        self.agents["tools"] = self._create(
            {
                "name": "tools",
                "tools": [
                    http("effect", "/effect", effect="idempotent", key_fields=["q"]),
                    http("read", "/read", read_only=True),
                    http("approved", "/effect", permission="ask"),
                    email,
                    {
                        "type": "client",
                        "name": "pick",
                        "description": "Ask the user to pick.",
                        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
                    },
                ],
                "webhook": {"url": f"{url}/hook"},
            }
        )
        self.agents["memory"] = self._create(
            {"name": "memory", "memory": {"enabled": True, "auto_recall": False}}
        )

    def _create(self, body: dict[str, Any]) -> str:
        status, _, agent = self.stack.invoke_api("POST", "/v1/agents", body, key=self.key)
        if status != 201:
            raise RuntimeError(f"soak agent {body['name']}: {status} {agent}")
        return str(agent["agent_id"])

    def plan(self, index: int) -> Planned:
        kind = KINDS[random.Random(f"{self.seed}/kind/{index}").randrange(len(KINDS))]
        tag = f"{self.prefix}-{index}"
        p = Planned(index, kind, tag, self.agents["tools"], [{"text": f"done {tag}"}])
        if kind == "attachment":
            data = base64.b64encode(f"notes for {tag}\n".encode()).decode()
            p.body["attachments"] = [{"name": "notes.txt", "content_type": "text/plain", "data": data}]
        elif kind == "http_tool":
            p.effects = [f"{tag}-e0", f"{tag}-e1"]
            p.script = [{"tool_calls": [{"name": "effect", "arguments": {"q": q}}]} for q in p.effects]
            p.script.append({"text": f"done {tag}"})
        elif kind == "parallel_reads":
            calls = [{"name": "read", "arguments": {"q": f"{tag}-r{j}"}} for j in range(3)]
            p.script = [{"tool_calls": calls}, {"text": f"read {tag}"}]
        elif kind == "send_email":
            mail = (f"{tag}@example.com", f"hello {tag}")
            p.emails = [mail]
            p.script = [
                {"tool_calls": [{"name": "send_email", "arguments": {"to": mail[0], "body": mail[1]}}]},
                {"text": "sent"},
            ]
        elif kind == "approval":
            p.effects = [f"{tag}-a0"]
            p.script = [
                {"tool_calls": [{"name": "approved", "arguments": {"q": p.effects[0]}}]},
                {"text": "approved"},
            ]
        elif kind == "client_tool":
            p.script = [{"tool_calls": [{"name": "pick", "arguments": {"q": tag}}]}, {"text": "picked"}]
        elif kind == "delegation":
            p.agent = self.agents["top"]
            p.script = [
                {"tool_calls": [{"name": "ask_middle", "arguments": {"message": f"{tag}.c1: middle"}}]},
                {"text": "top"},
            ]
        elif kind == "memory":
            p.agent = self.agents["memory"]
            p.script = [
                {"tool_calls": [{"name": "memory_save", "arguments": {"content": f"fact number {index}"}}]},
                {"text": "saved"},
            ]
        elif kind == "cancel":
            p.effects = [f"{tag}-x{j}" for j in range(4)]
            p.script = [{"tool_calls": [{"name": "effect", "arguments": {"q": q}}]} for q in p.effects]
            p.script.append({"text": "never"})
        return p

    async def drive(self, client: Any, p: Planned, out: Outcome) -> None:
        from stepwise_sdk.errors import ApiStatusError

        body = {"message": f"{p.tag}: {p.kind}", "script": p.script, **p.body}
        cancelled = False
        out.started = time.perf_counter()
        accepted = await client.runs.create(p.agent, body)
        out.run_id = accepted.run_id
        answered = False
        async for event in client.runs.events(accepted.run_id, wait=20.0):
            if out.first_event is None:
                out.first_event = time.perf_counter()
            if event.type == "approval_requested" and not answered:
                answered = True
                await asyncio.sleep(random.Random(p.tag).uniform(0.2, 1.5))  # late

                twice = (
                    client.approvals.approve(accepted.run_id, tool_call_id=event.data["tool_call_id"]),
                    client.interactions.respond(event.data["interaction_id"], {"approved": True}),
                )
                for got in await asyncio.gather(*twice, return_exceptions=True):
                    if isinstance(got, ApiStatusError) and got.status == 409:
                        continue  # the second answer loses, as it must
                    if isinstance(got, BaseException):
                        raise got
            elif event.type == "client_tool_requested":
                await client.interactions.respond(
                    event.data["interaction_id"],
                    {
                        "tool_call_id": event.data["tool_call_id"],
                        "outcome": "completed",
                        "output": {"picked": p.tag},
                    },
                )
            elif p.kind == "cancel" and event.type == "tool_result" and not cancelled:
                cancelled = True
                await client.runs.cancel(accepted.run_id)
            if event.type in ("run_completed", "run_failed", "run_cancelled"):
                out.terminal = time.perf_counter()
        view = await client.runs.get(accepted.run_id)
        out.status = view.status
        # Replays of failed runs: every failed run that executed no tool is replayed (one that did is
        # refused 409 tools_executed, as replay.py decides, and that refusal is right).
        if view.status == "failed" and view.tools_executed == [] and view.parent_run_id is None:
            try:
                again = await client.runs.replay(accepted.run_id)
            except ApiStatusError as exc:
                if exc.status != 409:
                    raise
                return
            out.replay_id = again.run_id
            await client.runs.wait(again.run_id, timeout=600)

    async def soak(self) -> tuple[list[Outcome], Recording, float]:
        from stepwise_local.gateway import serve
        from stepwise_sdk import AsyncStepwise
        from stepwise_sdk._core import RetryPolicy

        server = serve(self.stack.gateway, port=0, quiet=True)
        host, port = server.server_address[:2]
        transport = Recording()
        gate = asyncio.Semaphore(self.concurrency)
        outcomes = [Outcome(self.plan(i)) for i in range(self.runs)]
        retries = RetryPolicy(max_retries=6, jitter=random.Random(self.seed))
        began = time.perf_counter()
        try:
            async with AsyncStepwise(
                f"http://{host!s}:{port}", self.key, transport=transport, retries=retries, timeout=60
            ) as client:

                async def one(out: Outcome) -> None:
                    async with gate:
                        try:
                            await asyncio.wait_for(self.drive(client, out.planned, out), RUN_DEADLINE)
                            out.over = time.perf_counter()
                        except TimeoutError:
                            out.client_error = (
                                f"not over after {RUN_DEADLINE:g} s (the check says where it is)"
                            )
                        except Exception as exc:  # noqa: BLE001 - a client failure is a finding, not a crash
                            out.client_error = f"{type(exc).__name__}: {exc}"[:300]

                await asyncio.gather(*(one(o) for o in outcomes))
        finally:
            server.shutdown()
            server.server_close()
        return outcomes, transport, time.perf_counter() - began

    def run(self) -> Report:
        self._agents()
        self.faults.on = True
        self.faults.install(self.stack)
        try:
            outcomes, transport, seconds = asyncio.run(self.soak())
        finally:
            self.faults.remove()
        from stepwise.core.schema import utcnow
        from stepwise.runs import reconcile

        reconcile.sweep(now=utcnow() + reconcile.SWEEP_GRACE + timedelta(seconds=1))
        return check(self, outcomes, transport, seconds)


# --- The invariants --------------------------------------------------------------------------------


@dataclass
class Report:
    runs: int
    seconds: float
    runs_per_minute: float
    first_event_ms: tuple[float, float]  # p50, p99
    terminal_ms: tuple[float, float]
    statuses: dict[str, int]
    kinds: dict[str, int]
    faults: dict[str, int]
    invariants: dict[str, list[str]]  # name → violations (examples first); empty: held
    client_errors: list[str]
    api_statuses: dict[int, int]
    slowest: list[str]  # the runs the client was longest with, and what took it

    @property
    def violations(self) -> dict[str, list[str]]:
        return {k: v for k, v in self.invariants.items() if v}


INVARIANTS = (
    "1 terminal or answerably waiting",
    "2 effects at most once (exactly once when succeeded)",
    "3 event logs whole",
    "4 tools_executed true",
    "5 usage equals the model's count",
    "6 no 5xx but retryable 503s",
    "7 quota counters back to zero",
)


def check(soak: Soak, outcomes: list[Outcome], transport: Recording, seconds: float) -> Report:
    stack, peer, faults = soak.stack, soak.peer, soak.faults
    broken: dict[str, list[str]] = {name: [] for name in INVARIANTS}

    def api(path: str) -> Any:
        status, _, body = stack.invoke_api("GET", path, key=soak.key)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body}")
        return body

    def events_of(run_id: str) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        after = 0
        while True:
            page = api(f"/v1/runs/{run_id}/events?after={after}")
            got += page["events"]
            if page["next"] == after or page["done"]:
                return got
            after = page["next"]

    import boto3

    sfn = boto3.client("stepfunctions")
    machine = stack.state_machine_arn.replace(":stateMachine:", ":execution:")
    # One execution per run: two would run its steps twice, side by side.
    names: Counter[str] = Counter()
    for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=stack.state_machine_arn):
        names.update(e["name"] for e in page["executions"])
    for name, count in names.items():
        if count > 1:
            broken[INVARIANTS[0]].append(f"{name} has {count} executions")
    runs: dict[str, dict[str, Any]] = {}
    for out in outcomes:
        for run_id in (out.run_id, out.replay_id):
            if run_id:
                runs[run_id] = api(f"/v1/runs/{run_id}")
    # Children (delegation): walk the trees.
    frontier = [c for r in runs.values() for c in r["children"]]
    while frontier:
        child = frontier.pop()
        if child not in runs:
            runs[child] = api(f"/v1/runs/{child}")
            frontier += runs[child]["children"]
    # Every run the soak's tenant has is one the client started, replayed or delegated to: a run nobody
    # knows of is a start that ran twice (its effects under its own keys, its usage its own).
    listed: list[dict[str, Any]] = []
    token = None
    while True:
        page = api("/v1/runs?limit=100" + (f"&next_token={quote(token)}" if token else ""))
        listed += page["runs"]
        token = page.get("next_token")
        if not token:
            break
    if len(listed) < len(runs):
        broken[INVARIANTS[0]].append(f"the tenant lists {len(listed)} runs; the client knows {len(runs)}")
    for run in listed:
        if run["run_id"] not in runs:
            broken[INVARIANTS[0]].append(
                f"{run['run_id']} ({run['input'][:40]!r}) {run['status']}: a run the client never started"
            )

    logs = {run_id: events_of(run_id) for run_id in runs}
    for run_id, run in runs.items():
        where = f"{run_id} ({run['input'][:40]!r})"
        log = logs[run_id]
        # 1
        if run["status"] not in ("succeeded", "failed", "cancelled", "timed_out"):
            execution = sfn.describe_execution(executionArn=f"{machine}:{run_id}")["status"]
            if run["status"] != "waiting" or execution != "RUNNING":
                broken[INVARIANTS[0]].append(f"{where} is {run['status']}, its execution {execution}")
        # 3
        seqs = [e["seq"] for e in log]
        # A hole is by design where a writer died between reserving seqs and writing them (eventlog.py
        # reads past it): only a run whose process the soak killed may have one.
        holed = bool(seqs) and seqs != list(range(seqs[0], seqs[0] + len(seqs)))
        if holed and run_id not in faults.killed_tags:
            broken[INVARIANTS[2]].append(f"{where} seqs not contiguous: {seqs[:30]}")
        ends = [e["type"] for e in log if e["type"] in ("run_completed", "run_failed", "run_cancelled")]
        if run["finished_at"] is not None and (len(ends) != 1 or log[-1]["type"] not in ends):
            broken[INVARIANTS[2]].append(
                f"{where} {run['status']}: terminal events {ends}, last {log[-1]['type'] if log else None}"
            )
        # 4: a tool whose work the peer did must be named, unless the run cannot know (its process died)
        queried = {
            str((e["data"].get("arguments") or {}).get("q")): e["data"]["tool_name"]
            for e in log
            if e["type"] == "tool_call"
        }
        applied = {name for q, name in queried.items() if peer.effect_requests.get(q)}
        executed = run["tools_executed"]
        if executed is not None and not applied <= set(executed):
            broken[INVARIANTS[3]].append(f"{where} tools_executed {executed}, the peer did {sorted(applied)}")
        if executed is None and run_id not in faults.killed_tags:
            broken[INVARIANTS[3]].append(f"{where} {run['status']} with tools_executed null, no process lost")

    # 2
    for call_tag, keys in peer.effects.items():
        if len(keys) > 1:
            broken[INVARIANTS[1]].append(f"call {call_tag} applied under {len(keys)} Idempotency-Keys")
    for mail, n in peer.emails.items():
        if n > 1:
            tag = mail[0].split("@")[0]
            seen = [
                f"{r['run_id']} {r['status']} tools_executed {r['tools_executed']} trigger "
                f"{r.get('trigger')} replay_of {r.get('replay_of')}"
                for r in runs.values()
                if tag in r["input"]
            ]
            broken[INVARIANTS[1]].append(
                f"email to {mail[0]} sent {n} times under keys {sorted(peer.email_keys[mail])}; runs {seen}; "
                f"killed {[r for r in faults.killed_tags if any(r in x for x in seen)]}"
            )
    for out in outcomes:
        run = runs.get(out.run_id or "")
        if run is None or run["status"] != "succeeded":
            continue
        log = logs[out.run_id or ""]
        args = {
            e["data"]["tool_call_id"]: e["data"].get("arguments") or {}
            for e in log
            if e["type"] == "tool_call"
        }
        answered = [
            (args.get(e["data"]["tool_call_id"], {}), e["data"])
            for e in log
            if e["type"] == "tool_result" and "error" not in e["data"]
        ]
        for a, result in answered:
            applied = len(peer.effects.get(str(a.get("q")), ()))
            if str(a.get("q")) in out.planned.effects and applied != 1:
                broken[INVARIANTS[1]].append(
                    f"{out.run_id} succeeded, {a.get('q')} applied {applied}× for result {str(result)[:160]}"
                )
            sent = peer.emails.get((str(a.get("to")), str(a.get("body"))))
            if "to" in a and sent != 1:
                broken[INVARIANTS[1]].append(f"{out.run_id} succeeded, its email to {a['to']} sent {sent}×")
    # 5: per tag (a replay shares its original's; every leaf of a delegation is untagged, "?")
    usage_by_tag: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    members: dict[str, list[str]] = defaultdict(list)
    for run_id, run in runs.items():
        found = TAG.search(run["input"])
        tag = found.group(0) if found else "?"
        usage_by_tag[tag][0] += run["usage"]["input_tokens"]
        usage_by_tag[tag][1] += run["usage"]["output_tokens"]
        usage = run["usage"]
        members[tag].append(
            f"{run_id} {run['status']} [{usage['input_tokens']}, {usage['output_tokens']}]"
            + (f" child of {run['parent_run_id']}" if run["parent_run_id"] else "")
        )
        if run["parent_run_id"] is None:
            tree = [r for r in runs.values() if r["root_run_id"] == run_id]
            total = sum(r["usage"]["input_tokens"] for r in tree)
            if total != run["total_usage"]["input_tokens"]:
                shown = [
                    f"{r['run_id']} {r['status']} own {r['usage']['input_tokens']} total "
                    f"{r['total_usage']['input_tokens']} parent {r['parent_run_id']}"
                    for r in tree
                ]
                broken[INVARIANTS[4]].append(
                    f"{run_id} total_usage {run['total_usage']['input_tokens']}, its tree {total}: {shown}"
                )
    for tag in set(usage_by_tag) | {t for t in faults.model_calls if t.startswith(soak.prefix) or t == "?"}:
        calls = faults.model_calls.get(tag, [])
        counted = [sum(c["input"] for c in calls), sum(c["output"] for c in calls)]
        # A call answered to a Step that was then killed is recorded if the kill came after the step's
        # write of it, and cannot be otherwise: the usage may fall short by those calls, never more, and
        # never exceed what was paid (a call counted twice).
        died = faults.died_calls.get(tag, [])
        unknown = [sum(c["input"] for c in died), sum(c["output"] for c in died)]
        recorded = usage_by_tag.get(tag, [0, 0])
        if not all(counted[i] - unknown[i] <= recorded[i] <= counted[i] for i in (0, 1)):
            broken[INVARIANTS[4]].append(
                f"{tag} ({', '.join(members.get(tag, []))}): usage {recorded}, the model answered "
                f"{len(calls)} calls worth {counted}: {calls}; {len(died)} of them to a Step later killed"
            )
    # 6
    broken[INVARIANTS[5]] += transport.bad
    # 7
    from stepwise.core import quotas

    used = quotas.used(soak.tenant, quotas.ACTIVE_RUNS)
    active = [r for r in runs.values() if r["finished_at"] is None]
    if used != len(active):
        broken[INVARIANTS[6]].append(f"active_runs counter {used} with {len(active)} runs active")

    firsts = sorted((o.first_event - o.started) * 1000 for o in outcomes if o.first_event)
    ends = sorted((o.terminal - o.started) * 1000 for o in outcomes if o.terminal)
    return Report(
        runs=len(outcomes),
        seconds=seconds,
        runs_per_minute=len(outcomes) * 60 / seconds,
        first_event_ms=_p50_p99(firsts),
        terminal_ms=_p50_p99(ends),
        statuses=dict(Counter(str(r["status"]) for r in runs.values())),
        kinds=dict(Counter(o.planned.kind for o in outcomes)),
        faults=dict(sorted(faults.injected.items())),
        invariants=broken,
        client_errors=[
            f"{o.planned.tag} {o.planned.kind} {o.run_id}: {o.client_error}"
            for o in outcomes
            if o.client_error
        ],
        api_statuses=dict(sorted(transport.statuses.items())),
        slowest=[
            f"{o.planned.tag} {o.planned.kind} {o.run_id} ({o.status}): over after "
            f"{(o.over - o.started):.1f} s, terminal event after "
            f"{'-' if o.terminal is None else f'{o.terminal - o.started:.1f} s'}"
            + (f", replayed as {o.replay_id}" if o.replay_id else "")
            for o in sorted(outcomes, key=lambda o: -((o.over or 0) - o.started))[:3]
            if o.over is not None
        ],
    )


def _p50_p99(values: list[float]) -> tuple[float, float]:
    if not values:
        return (float("nan"), float("nan"))
    p99 = values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]
    return (statistics.median(values), p99)


def soak(
    stack: Any, runs: int, *, seed: int = SEED, rates: Rates | None = None, concurrency: int = CONCURRENCY
) -> Report:
    """Run the soak against a started LocalStack; faults are removed again before this returns."""
    s = Soak(stack, runs, seed, rates or Rates(), concurrency)
    try:
        return s.run()
    finally:
        s.peer.close()


def run() -> Section:
    from bench.harness import local

    n = int(os.environ.get("STEPWISE_SOAK_RUNS") or DEFAULT_RUNS)
    report = soak(local().stack, n)
    section = Section(f"Soak: {n} runs at once with faults at every seam (seed {SEED})")
    section.add("runs per minute held", report.runs_per_minute, "runs/min")
    section.add("start → first event, p50", report.first_event_ms[0], "ms", digits=0)
    section.add("start → first event, p99", report.first_event_ms[1], "ms", digits=0)
    section.add("start → terminal, p50", report.terminal_ms[0], "ms", digits=0)
    section.add("start → terminal, p99", report.terminal_ms[1], "ms", digits=0)
    for name, count in report.faults.items():
        section.add(f"fault: {name}", count, "injected")
    for name, found in report.invariants.items():
        section.add(f"invariant {name}", "held" if not found else f"BROKEN ×{len(found)}")
    section.notes += [f"{name}: {v}" for name, found in report.violations.items() for v in found[:EXAMPLES]]
    section.notes += report.client_errors[:EXAMPLES]
    section.notes += [f"slowest: {line}" for line in report.slowest]
    section.details = {
        "runs": report.runs,
        "seconds": round(report.seconds, 1),
        "statuses": report.statuses,
        "kinds": report.kinds,
        "faults": report.faults,
        "api_statuses": report.api_statuses,
        "invariants": {
            k: {"held": not v, "violations": len(v), "examples": v[:EXAMPLES]}
            for k, v in report.invariants.items()
        },
        "client_errors": report.client_errors,
        "slowest": report.slowest,
    }
    out = Path(__file__).resolve().parent / "results" / "soak.json"
    out.write_text(json.dumps({"title": section.title, **section.details}, indent=2, default=str) + "\n")
    return section

"""Streamed model text: `chunk` events (DynamoDB writes) per 1,000 completion tokens, and what streaming
costs the model step in wall time.

The model step streams from litellm and writes text as `chunk` events in batches
(stepwise.loop.chunks.ChunkBatcher: a flush at CHUNK_CHARS characters or, checked when a delta arrives,
CHUNK_SECONDS after the last flush). Here the real path runs: an agent whose model is "openai/gpt-fake",
litellm over loopback HTTP to tests/fakes/openai_server.py, the handlers in process on the local stack.

- fast stream: a ~4,000-token answer of common English words (one cl100k token each, counted with the
  encoding litellm bundles), sent in as many deltas as there are words, as fast as the server writes;
- the same answer in one delta: the baseline that isolates the per-delta cost in the model step;
- slow stream (the fake paced to SLOW_RATE deltas a second): the timer, not the size, sets the batches.

Chunk events are read back through GET /v1/runs/{id}/events (paged with after/next until done), and
their text must rebuild the answer. DynamoDB requests come from dynamodb_ops.Recorder, charged to the
model-step function; the model step's wall time is its Lambda invocation's.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from bench.dynamodb_ops import WRITES, Recorder
from bench.harness import Local, Section, local, timed_invocations

MODEL = "openai/gpt-fake"
MODEL_FUNCTION = "StepFunction"
FAST_TOKENS = 4_000
SLOW_TOKENS = 500
SLOW_RATE = 50.0  # deltas (≈ tokens) a second: a brisk hosted model
SSE_EXTRA = 3  # events the fake sends besides content deltas: role, finish_reason, usage
PROMPT_TOKENS = 40  # reported by the fake; the figure is about completion tokens
# Common words that cl100k encodes as one token with their leading space (checked at run time).
VOCABULARY = (
    "the model reads each tool result and then writes a short answer for the user about what it found "
    "in that list of items with their price date name place order time value number report table page "
    "file line word part case point fact group week month year day people company system state city "
    "before after because when while where which who this these those some many most other new old "
    "good great small large long first last next same different important public private open close"
)


def _answer(tokens: int, seed: int) -> tuple[str, int]:
    """A text of `tokens` one-token words and its cl100k token count (litellm's bundled encoding)."""
    import litellm

    encoding: Any = litellm.encoding  # tiktoken.Encoding, cl100k_base
    words = [w for w in dict.fromkeys(VOCABULARY.split()) if len(encoding.encode(" " + w)) == 1]
    rng = random.Random(seed)
    text = " ".join(rng.choice(words) for _ in range(tokens))
    return text, len(encoding.encode(text))


def _deltas(text: str, parts: int) -> int:
    """How many content deltas the fake sends for `chunks=parts` (it cuts the text in equal slices)."""
    size = -(-len(text) // max(1, min(parts, len(text))))
    return -(-len(text) // size)


class _Paced(list[dict[str, Any]]):
    """The fake's list of SSE events, iterated with a pause before each one."""

    def __init__(self, events: list[dict[str, Any]], delay: float) -> None:
        super().__init__(events)
        self.delay = delay

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for event in super().__iter__():
            time.sleep(self.delay)
            yield event


@contextmanager
def _paced(delay: float) -> Iterator[None]:
    """Make the fake server stream slowly: its handler iterates what `_chunks` returns as it writes."""
    from tests.fakes import openai_server

    original = openai_server._chunks

    def chunks(ident: str, request: dict[str, Any], reply: openai_server.Reply) -> list[dict[str, Any]]:
        return _Paced(original(ident, request, reply), delay)

    openai_server._chunks = chunks
    try:
        yield
    finally:
        openai_server._chunks = original


@contextmanager
def _environment(url: str) -> Iterator[None]:
    """litellm reads OPENAI_BASE_URL and OPENAI_API_KEY on every call; put back what was there."""
    wanted = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-fake"}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _measure(
    env: Local,
    recorder: Recorder,
    timings: list[tuple[str, float]],
    agent_id: str,
    answer: str,
    tokens: int,
) -> dict[str, Any]:
    """One run whose model answers `answer` (queued on the fake beforehand), read back and checked."""
    mark, timed = len(recorder.requests), len(timings)
    result = env.run(None, 1, agent_id=agent_id)
    if result.status != "succeeded":
        raise RuntimeError(f"streamed run {result.run_id} {result.status}: {result.error}")
    events = env.events(result.run_id)
    chunks = [e for e in events if e["type"] == "chunk"]
    rebuilt = "".join(e["data"]["text"] for e in chunks)
    if rebuilt != answer:
        raise RuntimeError(f"chunk events of {result.run_id} do not rebuild the answer")
    view = env.stack.invoke_api("GET", f"/v1/runs/{result.run_id}")[2]
    started = next(e["at"] for e in events if e["type"] == "step_started")
    writes = [r for r in recorder.requests[mark:] if r.function == MODEL_FUNCTION and r.operation in WRITES]
    model_seconds = sum(s for f, s in timings[timed:] if f == MODEL_FUNCTION)
    return {
        "run_id": result.run_id,
        "chars": len(answer),
        "tokens": tokens,
        "output_tokens": int(view["usage"]["output_tokens"]),
        "chunk_events": len(chunks),
        "chunk_sizes": [len(e["data"]["text"]) for e in chunks],
        "model_step_writes": len(writes),
        "model_step_ms": model_seconds * 1000,
        "first_chunk_ms": (_when(chunks[0]["at"]) - _when(started)).total_seconds() * 1000
        if chunks
        else None,
        "output_matches": view.get("output") == answer,
    }


def _client_only(answer: str) -> float:
    """ms for one streamed turn through complete() in this thread, text collected in a list."""
    from stepwise.llm.client import complete

    deltas: list[str] = []
    began = time.perf_counter()
    complete(model=MODEL, messages=[{"role": "user", "content": "hello"}], tools=None, on_text=deltas.append)
    took = (time.perf_counter() - began) * 1000
    if "".join(deltas) != answer:
        raise RuntimeError("complete() did not stream the answer it was given")
    return took


def _per_thousand(run: dict[str, Any]) -> float:
    return float(run["chunk_events"] * 1000 / max(run["output_tokens"], 1))


def run() -> Section:
    from stepwise.loop.chunks import CHUNK_CHARS, CHUNK_SECONDS
    from tests.fakes.openai_server import FakeOpenAI

    section = Section("Streaming: chunk events per 1,000 completion tokens (litellm → fake OpenAI server)")
    env = local()
    fake = FakeOpenAI()
    recorder = Recorder(env)
    fast_text, fast_tokens = _answer(FAST_TOKENS, seed=1)
    slow_text, slow_tokens = _answer(SLOW_TOKENS, seed=2)
    fast_deltas = _deltas(fast_text, fast_text.count(" ") + 1)
    slow_deltas = _deltas(slow_text, slow_text.count(" ") + 1)
    try:
        with _environment(fake.url), recorder.installed(), timed_invocations(env) as timings:
            agent_id = env.create_agent({"name": "bench-stream", "model": MODEL})
            # The first call through litellm's openai provider loads the OpenAI SDK: keep it out.
            fake.text("warming up", chunks=2)
            warm = _measure(env, recorder, timings, agent_id, "warming up", 2)
            fake.text(fast_text, chunks=fast_deltas).usage(PROMPT_TOKENS, fast_tokens)
            fast = _measure(env, recorder, timings, agent_id, fast_text, fast_tokens)
            fake.text(fast_text, chunks=1).usage(PROMPT_TOKENS, fast_tokens)
            whole = _measure(env, recorder, timings, agent_id, fast_text, fast_tokens)
            # The same stream through stepwise.llm.client.complete alone: no stack, no chunk writes.
            fake.text(fast_text, chunks=fast_deltas).usage(PROMPT_TOKENS, fast_tokens)
            client_ms = _client_only(fast_text)
            with _paced(1 / SLOW_RATE):
                fake.text(slow_text, chunks=slow_deltas).usage(PROMPT_TOKENS, slow_tokens)
                slow = _measure(env, recorder, timings, agent_id, slow_text, slow_tokens)
    finally:
        fake.close()

    batching = f"flush at {CHUNK_CHARS} chars or {CHUNK_SECONDS} s"
    section.add(
        "chunk events per 1,000 completion tokens, fast stream",
        _per_thousand(fast),
        "events",
        f"{fast['chunk_events']} events for {fast['output_tokens']:,} tokens, {fast['chars']:,} chars "
        f"in {fast_deltas:,} deltas; {batching}",
        digits=2,
    )
    extra_chunks = fast["chunk_events"] - whole["chunk_events"]
    per_chunk = (
        (fast["model_step_writes"] - whole["model_step_writes"]) / extra_chunks if extra_chunks else None
    )
    section.add(
        "  DynamoDB write requests per chunk event",
        per_chunk,
        "requests",
        "model-step writes, fast stream minus the same text in 1 delta (1 chunk event); "
        "UpdateItem reserving the seq on the log's head item + BatchWriteItem of the event",
        digits=2,
    )
    section.add(
        "  DynamoDB write requests for text per 1,000 completion tokens",
        None if per_chunk is None else _per_thousand(fast) * per_chunk,
        "requests",
        f"all model-step writes of that run: {fast['model_step_writes']} "
        f"(the 1-delta run: {whole['model_step_writes']})",
        digits=1,
    )
    section.add(
        f"chunk events per 1,000 completion tokens, slow stream ({SLOW_RATE:.0f} tok/s)",
        _per_thousand(slow),
        "events",
        f"{slow['chunk_events']} events for {slow['output_tokens']:,} tokens in {slow_deltas} deltas; the "
        f"{CHUNK_SECONDS} s timer sets the batches: at most 1000/({SLOW_RATE:.0f}·{CHUNK_SECONDS}) "
        f"= {1000 / (SLOW_RATE * CHUNK_SECONDS):.0f}",
        digits=1,
    )
    section.add(
        f"model step wall time, {fast['output_tokens']:,}-token answer in {fast_deltas:,} deltas",
        fast["model_step_ms"],
        "ms",
        "the Step Lambda invocation, fast stream",
        digits=0,
    )
    section.add(
        "  same answer in 1 delta",
        whole["model_step_ms"],
        "ms",
        f"{whole['chunk_events']} chunk event",
        digits=0,
    )
    section.add(
        "  the same stream through complete() alone",
        client_ms,
        "ms",
        "stepwise.llm.client outside the stack: litellm + OpenAI SDK, no chunk writes",
        digits=0,
    )
    section.add(
        "  model-step cost per streamed delta",
        (fast["model_step_ms"] - whole["model_step_ms"]) * 1000 / max(fast_deltas - 1, 1),
        "µs",
        "(fast − 1 delta) / extra deltas; the fake server shares this process (and its GIL)",
        digits=0,
    )
    section.add(
        f"model step wall time, slow stream ({slow_deltas} deltas at {SLOW_RATE:.0f}/s)",
        slow["model_step_ms"],
        "ms",
        f"the fake sleeps {(slow_deltas + SSE_EXTRA) / SLOW_RATE * 1000:,.0f} ms pacing its "
        f"{slow_deltas + SSE_EXTRA} SSE events",
        digits=0,
    )
    section.add(
        "step_started → first chunk event, fast / slow stream",
        f"{fast['first_chunk_ms']:.0f} / {slow['first_chunk_ms']:.0f}",
        "ms",
        "event timestamps; the first batch waits for its size or the timer",
    )
    section.notes.append(
        "every streamed run succeeded, its chunk events rebuilt the answer exactly"
        + ("" if all(r["output_matches"] for r in (fast, whole, slow)) else " (BUT an output differed)")
        + f"; usage reported {fast['output_tokens']:,} / {slow['output_tokens']} completion tokens"
    )
    sizes = fast["chunk_sizes"]
    section.notes.append(
        f"fast stream chunk sizes: {min(sizes)}–{max(sizes)} chars (median {sorted(sizes)[len(sizes) // 2]})"
    )
    section.details = {
        "model": MODEL,
        "chunk_chars": CHUNK_CHARS,
        "chunk_seconds": CHUNK_SECONDS,
        "slow_rate": SLOW_RATE,
        "runs": {"warmup": warm, "fast": fast, "one_delta": whole, "slow": slow},
        "client_only_ms": client_ms,
    }
    return section

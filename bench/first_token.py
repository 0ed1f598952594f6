"""Time to the first token, locally, on a warm stack: `POST /v1/agents/{id}/runs` → the model's first
request at a fake OpenAI server over loopback HTTP, and → the first `chunk` event at a WebSocket
follower. Median and p95 over RUNS runs, after WARM runs that load litellm, the OpenAI SDK and the
clients (not counted).

Each run is cut into named segments, so the next cut is obvious:
- API: the POST until its 202 (authorizer, the run's record, its session, StartExecution);
- start of the execution: the 202 until the first Step invocation begins (Step Functions' own
  start; negative when the execution started before the API returned);
- first Step's reads and writes: until the loop calls the model (its context, record, agent and
  budgets, the session's history, OnRunStart hooks, `running`, the user's message);
- the model request build: until the request arrives at the fake (the prompt, its token estimate,
  litellm's request);
- to the follower: until the first `chunk` event reaches the WebSocket follower, which asks to
  follow the run as soon as the POST answers (POST /v1/runs/{id}/follow, then connects).

The fake answers with text in three deltas, at once. Times are time.perf_counter() in this process:
the API is invoked in process (no socket), the Step by moto's Step Functions on its own thread.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.harness import Local, Section, local, median

MODEL = "openai/gpt-fake"
RUNS = 20
WARM = 3
GOAL_MS = 50.0  # issue 28: the model's first request within 50 ms of the POST (median)
ANSWER = "The first token, then two more."
SEGMENTS = (
    ("api", "API (POST → 202)"),
    ("execution", "start of the execution (202 → Step invoked)"),
    ("reads", "first Step's reads and writes (→ model call)"),
    ("build", "the model request build (→ request at the model)"),
    ("follower", "to the follower (request → first chunk at the WebSocket)"),
)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]


@contextmanager
def _marks(env: Local) -> Iterator[dict[str, list[float]]]:
    """When each Step invocation began and each model call was entered (perf_counter)."""
    from stepwise.loop import step

    marks: dict[str, list[float]] = {"step": [], "call_model": []}
    lambdas = env.stack.lambdas
    previous = lambdas.__dict__.get("invoke")
    inner = lambdas.invoke
    call_model = step.call_model

    def invoke(name_or_arn: str, event: Any) -> Any:
        if lambdas.logical_id(name_or_arn) == "StepFunction":
            marks["step"].append(time.perf_counter())
        return inner(name_or_arn, event)

    def entered(*args: Any, **kwargs: Any) -> Any:
        marks["call_model"].append(time.perf_counter())
        return call_model(*args, **kwargs)

    setattr(lambdas, "invoke", invoke)  # noqa: B010 - the moto seam looks it up on each call
    setattr(step, "call_model", entered)  # noqa: B010 - step.py calls it by this name
    try:
        yield marks
    finally:
        setattr(step, "call_model", call_model)  # noqa: B010
        if previous is None:
            del lambdas.invoke
        else:
            lambdas.invoke = previous  # type: ignore[method-assign]


def _follow(env: Local, run_id: str, seen: dict[str, float]) -> None:
    """Ask to follow the run, connect, and note when the first `chunk` event arrives."""
    from websockets.sync.client import connect

    status, _, issued = env.stack.invoke_api("POST", f"/v1/runs/{run_id}/follow?after=0")
    if status != 200:
        seen["error"] = status
        return
    with connect(issued["url"], open_timeout=10) as socket:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = json.loads(socket.recv(timeout=30))
            if message.get("type") == "chunk":
                seen["chunk"] = time.perf_counter()
                return
            if message.get("type") in ("run_succeeded", "run_failed", "run_cancelled"):
                return


def _one(env: Local, fake: Any, marks: dict[str, list[float]], agent_id: str) -> dict[str, float] | None:
    from tests.fakes.openai_server import Reply

    arrived: list[float] = []

    def decide(body: dict[str, Any]) -> Any:
        arrived.append(time.perf_counter())
        return Reply(content=ANSWER, chunks=3)

    fake.answer(decide)
    steps, calls = len(marks["step"]), len(marks["call_model"])
    began = time.perf_counter()
    status, _, accepted = env.stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "hello"})
    answered = time.perf_counter()
    if status != 202:
        raise RuntimeError(f"run not accepted: {status} {accepted}")
    seen: dict[str, float] = {}
    follower = threading.Thread(target=_follow, args=(env, accepted["run_id"], seen), daemon=True)
    follower.start()
    env.wait_run(accepted["run_id"])
    follower.join(timeout=30)
    if not arrived or "chunk" not in seen or len(marks["step"]) <= steps or len(marks["call_model"]) <= calls:
        return None
    step_at, model_at = marks["step"][steps], marks["call_model"][calls]
    ms = 1000.0
    return {
        "api": (answered - began) * ms,
        "execution": (step_at - answered) * ms,
        "reads": (model_at - step_at) * ms,
        "build": (arrived[0] - model_at) * ms,
        "follower": (seen["chunk"] - arrived[0]) * ms,
        "first_request": (arrived[0] - began) * ms,
        "first_chunk": (seen["chunk"] - began) * ms,
    }


def run() -> Section:
    from bench.streaming import _environment
    from tests.fakes.openai_server import FakeOpenAI

    section = Section(f"Time to the first token, warm, local: {RUNS} runs (fake OpenAI server, WebSocket)")
    env = local()
    fake = FakeOpenAI()
    results: list[dict[str, float]] = []
    missed = 0
    try:
        with _environment(fake.url), _marks(env) as marks:
            agent_id = env.create_agent({"name": "bench-first-token", "model": MODEL})
            for _ in range(WARM):
                _one(env, fake, marks, agent_id)
            for _ in range(RUNS):
                one = _one(env, fake, marks, agent_id)
                if one is None:
                    missed += 1
                else:
                    results.append(one)
    finally:
        fake.close()
    if not results:
        section.notes.append("NO RUN REACHED THE MODEL AND THE FOLLOWER")
        return section
    first = [r["first_request"] for r in results]
    section.add(
        "POST → the model's first request, median",
        median(first),
        "ms",
        f"p95 {p95(first):.1f} ms; goal ≤ {GOAL_MS:g} ms (median)",
    )
    chunk = [r["first_chunk"] for r in results]
    section.add(
        "POST → first chunk at a WebSocket follower, median", median(chunk), "ms", f"p95 {p95(chunk):.1f} ms"
    )
    for key, label in SEGMENTS:
        values = [r[key] for r in results]
        section.add(f"  {label}", median(values), "ms", f"p95 {p95(values):.1f} ms")
    if missed:
        section.notes.append(
            f"{missed} of {RUNS} runs did not reach both the model and the follower: left out"
        )
    section.notes.append(
        "segments are medians each: they add up to about the totals, not exactly; "
        f"spread of the first request: stdev {statistics.pstdev(first):.1f} ms"
    )
    section.details = {"runs": results}
    return section

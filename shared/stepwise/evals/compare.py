"""Two runs side by side (`GET /v1/runs/{a}/compare/{b}`): their trajectories (tool calls in order,
with what became of each), final answers, counters with deltas (b minus a), and the first place they
part. Usually a run and its what-if, but any two runs of the tenant compare.

Trajectories come from the runs' messages (the same durable record a what-if serves from, not their
events, which expire sooner); a what-if run's calls carry their outcome (`served` with `served_from`,
`live`, `diverged`), the original's calls it served are `matched`, and any other call is `executed`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.runs.record import canonical, parsed

CallStatus = Literal["matched", "served", "live", "diverged", "executed"]


class TrajectoryCall(BaseModel):
    index: int
    call_id: str
    tool: str
    arguments: Any
    status: CallStatus
    served_from: str | None = None
    error: str | None = None  # the result's error code, when it was one


class Side(BaseModel):
    run_id: str
    agent_id: str
    status: str
    output: str | None
    steps: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost_usd: float | None
    wall_seconds: float | None
    trajectory: list[TrajectoryCall]


class Deltas(BaseModel):
    """b minus a; null where either side is unknown."""

    steps: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost_usd: float | None
    wall_seconds: float | None


class Divergence(BaseModel):
    index: int  # the place in the trajectories
    reason: Literal["tool", "arguments", "only_in_a", "only_in_b", "diverged"]
    a: TrajectoryCall | None
    b: TrajectoryCall | None


class Summary(BaseModel):
    """What a suite's result embeds per case."""

    same_answer: bool
    same_trajectory: bool
    calls_a: int
    calls_b: int
    served: int
    live_reads: int
    divergences: int
    first_divergence_index: int | None
    deltas: Deltas


class Comparison(BaseModel):
    a: Side
    b: Side
    deltas: Deltas
    first_divergence: Divergence | None
    summary: Summary


def _error_code(message: dict[str, Any] | None) -> str | None:
    content = parsed(message.get("content")) if message else None
    if isinstance(content, dict) and len(content) == 1 and isinstance(content.get("error"), dict):
        return str(content["error"].get("code"))
    return None


def _calls(tenant_id: str, run: Run, matched: set[str]) -> list[TrajectoryCall]:
    messages = stores().sessions.run_messages(tenant_id, run.session_id, run.run_id)
    results = {str(m.get("tool_call_id")): m for m in messages if m.get("role") == "tool"}
    out: list[TrajectoryCall] = []
    for message in messages:
        for call in message.get("tool_calls") or [] if message.get("role") == "assistant" else []:
            call_id = str(call.get("id"))
            function = call.get("function") or {}
            outcome, _, detail = run.what_if_calls.get(call_id, "").partition(":")
            status: CallStatus = "executed"
            if outcome in ("served", "live", "diverged"):
                status = outcome  # type: ignore[assignment]
            elif call_id in matched:
                status = "matched"
            out.append(
                TrajectoryCall(
                    index=len(out),
                    call_id=call_id,
                    tool=str(function.get("name")),
                    arguments=parsed(function.get("arguments", "{}")),
                    status=status,
                    served_from=detail if outcome == "served" else None,
                    error=detail if outcome == "diverged" else _error_code(results.get(call_id)),
                )
            )
    return out


def _side(tenant_id: str, run: Run, matched: set[str]) -> Side:
    wall = (run.finished_at - run.created_at).total_seconds() if run.finished_at else None
    return Side(
        run_id=run.run_id,
        agent_id=run.agent_id,
        status=run.status,
        output=run.output,
        steps=run.steps,
        input_tokens=run.usage.input_tokens,
        cached_tokens=run.usage.cached_tokens,
        output_tokens=run.usage.output_tokens,
        cost_usd=run.usage.cost_usd,
        wall_seconds=wall,
        trajectory=_calls(tenant_id, run, matched),
    )


def _minus(b: float | None, a: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 9)


def _deltas(a: Side, b: Side) -> Deltas:
    return Deltas(
        steps=b.steps - a.steps,
        input_tokens=b.input_tokens - a.input_tokens,
        cached_tokens=b.cached_tokens - a.cached_tokens,
        output_tokens=b.output_tokens - a.output_tokens,
        cost_usd=_minus(b.cost_usd, a.cost_usd),
        wall_seconds=_minus(b.wall_seconds, a.wall_seconds),
    )


def first_divergence(a: list[TrajectoryCall], b: list[TrajectoryCall]) -> Divergence | None:
    """The first place the trajectories part: another tool, other arguments, a call only one side
    made, or a what-if call that got no recorded result."""
    for index in range(max(len(a), len(b))):
        left = a[index] if index < len(a) else None
        right = b[index] if index < len(b) else None
        reason: Any = None
        if left is None:
            reason = "only_in_b"
        elif right is None:
            reason = "only_in_a"
        elif left.tool != right.tool:
            reason = "tool"
        elif canonical(left.arguments) != canonical(right.arguments) and right.status != "served":
            reason = "arguments"  # a call served under match "name" answered as its recorded one
        elif "diverged" in (left.status, right.status):
            reason = "diverged"
        if reason is not None:
            return Divergence(index=index, reason=reason, a=left, b=right)
    return None


def compare(tenant_id: str, a_run_id: str, b_run_id: str) -> Comparison:
    """NotFound when either run is unknown or another tenant's."""
    runs = stores().runs
    run_a, run_b = runs.get(tenant_id, a_run_id), runs.get(tenant_id, b_run_id)
    served_a = {o.partition(":")[2] for o in run_a.what_if_calls.values() if o.startswith("served:")}
    served_b = {o.partition(":")[2] for o in run_b.what_if_calls.values() if o.startswith("served:")}
    a = _side(tenant_id, run_a, served_b if run_b.what_if_of == run_a.run_id else set())
    b = _side(tenant_id, run_b, served_a if run_a.what_if_of == run_b.run_id else set())
    deltas = _deltas(a, b)
    divergence = first_divergence(a.trajectory, b.trajectory)
    counters = run_b.what_if_counters() if run_b.what_if_of else run_a.what_if_counters()
    summary = Summary(
        same_answer=(a.output or "").strip() == (b.output or "").strip(),
        same_trajectory=divergence is None,
        calls_a=len(a.trajectory),
        calls_b=len(b.trajectory),
        served=counters["served"],
        live_reads=counters["live_reads"],
        divergences=counters["divergences"],
        first_divergence_index=divergence.index if divergence else None,
        deltas=deltas,
    )
    return Comparison(a=a, b=b, deltas=deltas, first_divergence=divergence, summary=summary)

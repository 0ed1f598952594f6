"""Plain-text rendering, as pure functions from API dicts to lines: run events for the live display,
tables for listings, key/value blocks for single records. Nothing here does I/O."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

VALUE_CHARS = 60  # one argument's value in a tool call line
ARGUMENTS_CHARS = 160
OUTPUT_CHARS = 200  # a tool result, an answer in a listing
INDENT = "  "

_SPACES = re.compile(r"\s+")


def clip(text: str, limit: int) -> str:
    """One line, at most `limit` characters: whitespace runs (newlines included) become one space."""
    flat = _SPACES.sub(" ", text).strip()
    return flat if len(flat) <= limit else flat[: max(limit - 3, 0)] + "..."


def compact(value: Any) -> str:
    """A value on one line: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def summarize(value: Any, limit: int = OUTPUT_CHARS) -> str:
    return clip(compact(value), limit)


def summarize_arguments(arguments: Any, limit: int = ARGUMENTS_CHARS) -> str:
    """`city="Paris", days=3`: each value as JSON and clipped, the whole clipped again."""
    if not isinstance(arguments, dict):
        return summarize(arguments, limit)
    parts = [
        f"{name}={clip(json.dumps(value, ensure_ascii=False, default=str), VALUE_CHARS)}"
        for name, value in arguments.items()
    ]
    return clip(", ".join(parts), limit)


def call(tool_name: Any, arguments: Any) -> str:
    return f"{tool_name}({summarize_arguments(arguments)})"


def usage_text(usage: dict[str, Any] | None) -> str:
    usage = usage or {}
    return (
        f"tokens: {usage.get('input_tokens', 0)} in, {usage.get('output_tokens', 0)} out, "
        f"{usage.get('cached_tokens', 0)} cached"
    )


def when(value: Any) -> str:
    """An API timestamp as `2026-11-30 03:04:08` (UTC, to the second)."""
    if not value:
        return "-"
    text = str(value).replace("T", " ")
    return text[:19] if len(text) >= 19 else text


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


# --- run events -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hints:
    """What commands printed next to an event need: the run, and how to call this CLI again."""

    run_id: str
    cli: str = "stepwise"


def event_lines(event: dict[str, Any], hints: Hints) -> list[str]:
    """The display of one event, except `chunk` (streamed text, see Display). Unknown types still
    show, so a newer server never makes the CLI silent."""
    kind = str(event.get("type"))
    data = event.get("data") or {}
    render = _RENDERERS.get(kind)
    if render is None:
        return [f"{kind}: {summarize(data)}"]
    return render(data, hints)


def _run_started(data: dict[str, Any], hints: Hints) -> list[str]:
    return [
        f"run {hints.run_id} started: agent {data.get('agent_id')}, session {data.get('session_id')}, "
        f"up to {data.get('max_steps')} steps"
    ]


def _step_started(data: dict[str, Any], hints: Hints) -> list[str]:
    return [f"step {data.get('step')}"]


def _quiet(data: dict[str, Any], hints: Hints) -> list[str]:
    return []


def _tool_call(data: dict[str, Any], hints: Hints) -> list[str]:
    return [f"{INDENT}-> {call(data.get('tool_name'), data.get('arguments'))}"]


def _tool_result(data: dict[str, Any], hints: Hints) -> list[str]:
    name = data.get("tool_name")
    note = " (deduplicated: the effect had already happened)" if data.get("deduplicated") else ""
    error = data.get("error")
    if isinstance(error, dict):
        message = clip(f"{error.get('code')}: {error.get('message')}", OUTPUT_CHARS)
        return [f"{INDENT}<- {name} failed: {message}{note}"]
    return [f"{INDENT}<- {name}: {summarize(data.get('output'))}{note}"]


def _approval_requested(data: dict[str, Any], hints: Hints) -> list[str]:
    tool_call_id = data.get("tool_call_id")
    expires = f" (expires {when(data.get('expires_at'))} UTC)" if data.get("expires_at") else ""
    lines = [f"{INDENT}! approval needed: {call(data.get('tool_name'), data.get('arguments'))}{expires}"]
    if data.get("approval_url"):
        lines.append(f"{INDENT}    review:  {data['approval_url']}")
    lines += [
        f"{INDENT}    approve: {hints.cli} approve {hints.run_id} --tool-call {tool_call_id}",
        f"{INDENT}    deny:    {hints.cli} deny {hints.run_id} --tool-call {tool_call_id} --reason '...'",
    ]
    return lines


def _approval_decided(data: dict[str, Any], hints: Hints) -> list[str]:
    verdict = "approved" if data.get("approved") else "denied"
    by = f" by {data['decided_by']}" if data.get("decided_by") else ""
    reason = f": {clip(str(data['reason']), OUTPUT_CHARS)}" if data.get("reason") else ""
    return [f"{INDENT}{data.get('tool_name')} {verdict}{by}{reason}"]


def _client_tool_requested(data: dict[str, Any], hints: Hints) -> list[str]:
    return [
        f"{INDENT}? client tool waits for your app: {call(data.get('tool_name'), data.get('arguments'))}",
        f"{INDENT}    answer:  {hints.cli} respond {data.get('interaction_id')} "
        f"--tool-call-id {data.get('tool_call_id')} --output '<json>'",
    ]


def _client_tool_answered(data: dict[str, Any], hints: Hints) -> list[str]:
    return [f"{INDENT}{data.get('tool_name')} answered by the app: {data.get('outcome')}"]


def _hook_blocked(data: dict[str, Any], hints: Hints) -> list[str]:
    target = f" on {data['tool_name']}" if data.get("tool_name") else ""
    message = clip(str(data.get("message") or "no reason given"), OUTPUT_CHARS)
    return [f"{INDENT}x blocked by hook {data.get('hook_id')} ({data.get('event')}{target}): {message}"]


def _compaction(data: dict[str, Any], hints: Hints) -> list[str]:
    return [
        f"{INDENT}(history compacted for the model: {data.get('tokens_before')} -> "
        f"{data.get('tokens_after')} tokens, {data.get('shortened_tool_results', 0)} tool results "
        f"shortened, {data.get('summarized_messages', 0)} messages summarized)"
    ]


def _delegation_started(data: dict[str, Any], hints: Hints) -> list[str]:
    return [
        f"{INDENT}=> {data.get('tool_name')}: delegated to run {data.get('child_run_id')} "
        f"(agent {data.get('agent_id')})"
    ]


def _delegation_completed(data: dict[str, Any], hints: Hints) -> list[str]:
    # The event names the call and the child; the follower adds the tool name it saw at the start.
    name = data.get("tool_name") or data.get("tool_call_id")
    return [f"{INDENT}<= {name}: run {data.get('child_run_id')} {data.get('status')}"]


def _run_completed(data: dict[str, Any], hints: Hints) -> list[str]:
    return [
        f"answer: {data.get('output') or ''}",
        f"succeeded in {data.get('steps')} steps, {usage_text(data.get('usage'))}",
    ]


def _run_failed(data: dict[str, Any], hints: Hints) -> list[str]:
    error = data.get("error") or {}
    return [f"failed: {error.get('code')}: {error.get('message')}"]


def _run_cancelled(data: dict[str, Any], hints: Hints) -> list[str]:
    return [f"cancelled: {data.get('reason') or 'no reason given'}"]


def _node_where(data: dict[str, Any]) -> str:
    where = str(data.get("node_id"))
    if data.get("index") is not None:
        where += f"[{data['index']}]"
    if data.get("iteration") is not None:
        where += f" (iteration {data['iteration']})"
    return where


def _node_started(data: dict[str, Any], hints: Hints) -> list[str]:
    run = f" run {data['child_run_id']}" if data.get("child_run_id") else ""
    return [f"{INDENT}> {_node_where(data)}{run}{' (reused)' if data.get('reused') else ''}"]


def _node_completed(data: dict[str, Any], hints: Hints) -> list[str]:
    return [f"{INDENT}< {_node_where(data)} done"]


def _node_failed(data: dict[str, Any], hints: Hints) -> list[str]:
    error = data.get("error") or {}
    return [f"{INDENT}! {_node_where(data)} failed: {error.get('code')}: {error.get('message')}"]


_RENDERERS = {
    "run_started": _run_started,
    "step_started": _step_started,
    "step_completed": _quiet,
    "tool_call": _tool_call,
    "tool_result": _tool_result,
    "approval_requested": _approval_requested,
    "approval_decided": _approval_decided,
    "client_tool_requested": _client_tool_requested,
    "client_tool_answered": _client_tool_answered,
    "hook_blocked": _hook_blocked,
    "compaction": _compaction,
    "delegation_started": _delegation_started,
    "delegation_completed": _delegation_completed,
    "run_completed": _run_completed,
    "run_failed": _run_failed,
    "run_cancelled": _run_cancelled,
    "node_started": _node_started,
    "node_completed": _node_completed,
    "node_failed": _node_failed,
}
TERMINAL_EVENTS = frozenset({"run_completed", "run_failed", "run_cancelled"})


@dataclass
class Display:
    """Turns a run's events, in order, into the text to write. Text from `chunk` events is written as it
    arrives; each chunk's offset lets a step's retried text (Step Functions retries a model step) be
    dropped rather than written twice. The final answer is not repeated when it was just streamed."""

    hints: Hints
    finished: bool = False
    _streamed: dict[int, str] = field(default_factory=dict)
    _last_step: int | None = None
    _line_open: bool = False

    def feed(self, event: dict[str, Any]) -> str:
        kind = event.get("type")
        data = event.get("data") or {}
        if kind == "chunk":
            return self._chunk(data)
        if kind == "step_started":
            self._last_step = _int(data.get("step"))
        lines = event_lines(event, self.hints)
        if kind == "run_completed" and self._just_streamed(data.get("output")):
            lines = lines[1:]  # the answer is on screen already
        if kind in TERMINAL_EVENTS:
            self.finished = True
        if not lines:
            return ""
        text = "\n".join(lines) + "\n"
        if self._line_open:
            text = "\n" + text
        self._line_open = False
        return text

    def _chunk(self, data: dict[str, Any]) -> str:
        step = _int(data.get("step"))
        text = str(data.get("text") or "")
        have = self._streamed.get(step, "")
        offset = _int(data.get("offset"), len(have))
        new = text[max(len(have) - offset, 0) :]
        if not new:
            return ""
        self._streamed[step] = have + new
        self._last_step = step
        start = "" if self._line_open else INDENT
        self._line_open = not new.endswith("\n")
        return start + new.replace("\n", "\n" + INDENT).removesuffix(INDENT)

    def _just_streamed(self, output: Any) -> bool:
        streamed = self._streamed.get(self._last_step or -1, "")
        return bool(streamed.strip()) and streamed.strip() == str(output or "").strip()


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


# --- records --------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """Columns padded to their widest cell; the last column is left ragged."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(cell.ljust(widths[i]) if i < len(headers) - 1 else cell for i, cell in enumerate(row))
        for row in cells
    ]


def block(pairs: Iterable[tuple[str, Any]]) -> list[str]:
    """`key  value` lines, keys aligned; pairs whose value is None are left out."""
    kept = [(k, v) for k, v in pairs if v is not None]
    width = max((len(k) for k, _ in kept), default=0)
    return [f"{k.ljust(width)}  {v}" for k, v in kept]


def _what_if_counters(run: dict[str, Any]) -> str | None:
    if not run.get("what_if_of"):
        return None
    return f"{run.get('served')}, live reads {run.get('live_reads')}, divergences {run.get('divergences')}"


def run_block(run: dict[str, Any]) -> list[str]:
    error = run.get("error") or None
    tools = run.get("tools_executed")
    return block(
        [
            ("run", run.get("run_id")),
            ("status", run.get("status")),
            ("agent", run.get("agent_id")),
            ("session", run.get("session_id")),
            ("replay of", run.get("replay_of")),
            ("what-if of", run.get("what_if_of")),
            ("served", _what_if_counters(run)),
            ("input", clip(str(run.get("input") or ""), OUTPUT_CHARS)),
            ("output", run.get("output")),
            ("error", f"{error.get('code')}: {error.get('message')}" if isinstance(error, dict) else None),
            ("steps", f"{run.get('steps')} of {run.get('max_steps')}"),
            ("usage", usage_text(run.get("usage"))),
            ("tools", "unknown" if tools is None else (", ".join(tools) or "none")),
            ("created", when(run.get("created_at"))),
            ("finished", when(run.get("finished_at")) if run.get("finished_at") else None),
        ]
    )


def run_outcome(run: dict[str, Any]) -> list[str]:
    """The closing line of a followed run, from its final record."""
    status = run.get("status")
    if status == "succeeded":
        return [f"succeeded in {run.get('steps')} steps, {usage_text(run.get('usage'))}"]
    error = run.get("error") or {}
    return [f"{status}: {error.get('code')}: {error.get('message')}"]


def runs_table(runs: list[dict[str, Any]]) -> list[str]:
    return table(
        ["RUN", "STATUS", "AGENT", "STEPS", "CREATED", "INPUT"],
        [
            [
                r.get("run_id"),
                r.get("status"),
                r.get("agent_id"),
                r.get("steps"),
                when(r.get("created_at")),
                clip(str(r.get("input") or ""), 50),
            ]
            for r in runs
        ],
    )


def _delta(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:+.6f}".rstrip("0").rstrip(".") if isinstance(value, float) else f"{value:+d}"


def comparison_lines(compared: dict[str, Any]) -> list[str]:
    """Two runs side by side: their counters with deltas, their trajectories call by call (each with
    what became of it), the first divergence and the answers."""
    a, b, deltas = compared["a"], compared["b"], compared["deltas"]
    counters = ["steps", "input_tokens", "cached_tokens", "output_tokens", "cost_usd", "wall_seconds"]
    lines = table(
        ["", a["run_id"], b["run_id"], "DELTA"],
        [[name, a.get(name), b.get(name), _delta(deltas.get(name))] for name in counters],
    )
    lines.append("")
    left, right = a.get("trajectory") or [], b.get("trajectory") or []

    def cell(calls: list[dict[str, Any]], index: int) -> str:
        if index >= len(calls):
            return ""
        found = calls[index]
        return f"{call(found['tool'], found.get('arguments'))} [{found['status']}]"

    lines += table(
        ["#", "A", "B"], [[i, cell(left, i), cell(right, i)] for i in range(max(len(left), len(right)))]
    )
    divergence = compared.get("first_divergence")
    lines.append("")
    if divergence:
        lines.append(
            f"first divergence: call {divergence['index']} ({divergence['reason'].replace('_', ' ')})"
        )
    else:
        lines.append("no divergence: the same calls in the same order")
    lines += [f"answer A: {clip(str(a.get('output') or ''), OUTPUT_CHARS)}"]
    lines += [f"answer B: {clip(str(b.get('output') or ''), OUTPUT_CHARS)}"]
    return lines


def detail_lines(details: Any) -> list[str]:
    """An API error's details (always an object), short: a validation error's fields (`errors`) one per
    line, then any other key as key: value."""
    if not details:
        return []
    if not isinstance(details, dict):
        return [summarize(details)]
    lines: list[str] = []
    fields = details.get("errors")
    if isinstance(fields, list) and all(isinstance(d, dict) and "msg" in d for d in fields):
        lines += [f"{'.'.join(str(p) for p in d.get('loc', [])) or '(body)'}: {d['msg']}" for d in fields]
    else:
        fields = None
    rest = {key: value for key, value in details.items() if fields is None or key != "errors"}
    return lines + [f"{key}: {summarize(value)}" for key, value in rest.items()]

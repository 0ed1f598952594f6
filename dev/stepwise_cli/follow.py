"""Following a run: over the follow WebSocket (`POST /v1/runs/{id}/follow`), else with the SDK's event
iterator (long polls of `GET /v1/runs/{id}/events` that resume by seq); write each event as it arrives,
and end with the run's final status as the exit code.

A run that delegates is followed as a tree: on `delegation_started` the child run's own events are
followed too, on a thread of their own (concurrent children run at once), each of its lines indented
one level deeper than its parent's and named by the tool that started it; the parent's
`delegation_completed` waits for the child's block to end, so it closes the block. A descendant's human
waits are also copied into the root's stream (they carry the descendant's `run_id`): the descendant's
own follower shows them, once. Lines from concurrent runs never interleave inside a line: a child's
streamed text is written a whole line at a time.

The socket is the cheap way (no function runs while the run waits); long-polling is the way that always
works. A socket that cannot be opened, or that ends before the run's terminal event (API Gateway closes
idle ones after 10 minutes), hands over to long-polling from the last seq received.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from stepwise_cli.client import data
from stepwise_cli.context import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, Context
from stepwise_cli.render import INDENT, Display, Hints, run_outcome
from stepwise_sdk import Stepwise, StepwiseError

ENDED_AS = {"run_completed": "succeeded", "run_failed": "failed", "run_cancelled": "cancelled"}
OPEN_TIMEOUT = 10.0  # seconds to open the socket before falling back to long-polling
# Seconds to wait for a child's block to end once its parent says it ended (its terminal event is
# already stored by then, so this only bounds a stream that broke).
CHILD_END_TIMEOUT = 30.0

Socket = Callable[[str], Iterable[str]]
"""Opens a follow URL; yields its text messages until the server closes it. OSError when it cannot."""


class SocketUnavailable(Exception):
    """The follow socket could not be opened or broke: long-polling takes over."""


def websocket(url: str) -> Iterator[str]:
    """The follow URL's messages over a real WebSocket (websockets' sync client)."""
    from websockets.exceptions import ConnectionClosedOK, InvalidHandshake, WebSocketException
    from websockets.sync.client import connect

    try:
        with connect(url, open_timeout=OPEN_TIMEOUT, compression=None) as socket:
            try:
                for message in socket:
                    yield message if isinstance(message, str) else message.decode()
            except ConnectionClosedOK:
                return
    except (OSError, InvalidHandshake, WebSocketException, TimeoutError) as exc:
        raise SocketUnavailable(str(exc)) from exc


def exit_code(run: dict[str, Any]) -> int:
    """0 when the run succeeded, 1 when it ended any other way (failed, cancelled, timed out)."""
    return EXIT_OK if run.get("status") == "succeeded" else EXIT_RUN_FAILED


def socket_events(client: Stepwise, run_id: str, after: int, socket: Socket) -> Iterator[dict[str, Any]]:
    """The run's events after `after` over the follow socket; SocketUnavailable when there is none."""
    try:
        issued = client.runs.follow(run_id, after=after)
    except StepwiseError as exc:  # an older server, or one the socket cannot reach
        raise SocketUnavailable(str(exc)) from exc
    try:
        for message in socket(issued.url):
            yield json.loads(message)
    except (OSError, ValueError) as exc:
        raise SocketUnavailable(str(exc)) from exc


class Output:
    """Where every run of a followed tree writes: one lock, so concurrent runs' lines stay whole."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
        self._lock = threading.Lock()
        self._at_line_start = True

    def raw(self, text: str) -> None:
        """The followed run's own text, as it comes (streamed text may end mid-line)."""
        if not text:
            return
        with self._lock:
            self._ctx.write(text)
            self._at_line_start = text.endswith("\n")

    def lines(self, prefix: str, lines: list[str]) -> None:
        with self._lock:
            opened = "" if self._at_line_start else "\n"
            self._ctx.write(opened + "".join(f"{prefix}{line}\n" for line in lines))
            self._at_line_start = True


class Branch:
    """A child run's share of the output: its lines under its prefix, a whole line at a time."""

    def __init__(self, out: Output, prefix: str) -> None:
        self.out, self.prefix = out, prefix
        self._partial = ""

    def write(self, text: str) -> None:
        if not self.prefix:
            self.out.raw(text)
            return
        *whole, self._partial = (self._partial + text).split("\n")
        if whole:
            self.out.lines(self.prefix, whole)

    def close(self) -> None:
        if self._partial:
            self.out.lines(self.prefix, [self._partial])
            self._partial = ""


class Follower:
    """One run of the tree: its events written through its branch, its children followed beside it."""

    def __init__(
        self,
        ctx: Context,
        out: Output,
        run_id: str,
        socket: Socket,
        *,
        after: int = 0,
        depth: int = 0,
        label: str = "",
    ) -> None:
        self.ctx, self.out, self.run_id, self.socket = ctx, out, run_id, socket
        self.after, self.depth, self.label = after, depth, label
        prefix = f"{INDENT * depth}[{label}] " if depth else ""
        self.branch = Branch(out, prefix)
        self.display = Display(Hints(run_id=run_id, cli=ctx.cli))
        self.ended_as: str | None = None
        self.done = False
        self._children: dict[str, tuple[str, threading.Thread]] = {}  # child run id → (tool, follower)

    def events(self) -> Iterator[dict[str, Any]]:
        with contextlib.suppress(SocketUnavailable):  # long-polling takes over from the last seq shown
            yield from socket_events(self.ctx.client, self.run_id, self.after, self.socket)
        if not self.done:
            for polled in self.ctx.client.runs.events(self.run_id, after=self.after):
                yield data(polled)

    def show(self, event: dict[str, Any]) -> None:
        seq = int(event.get("seq", self.after))
        if seq <= self.after:
            return  # a socket handed over to polling (or the reverse) may overlap by an event
        self.after = seq
        kind, details = str(event.get("type")), event.get("data") or {}
        self.ended_as = ENDED_AS.get(kind, self.ended_as)
        self.done = self.done or kind in ENDED_AS
        if self.ctx.json:
            self.out.raw(json.dumps(event, ensure_ascii=False) + "\n")
            return
        if details.get("run_id") not in (None, self.run_id):
            return  # a descendant's wait, copied here for apps that watch the root: its branch shows it
        if kind == "delegation_completed":
            tool_name = self._close_child(str(details.get("child_run_id")))
            event = {**event, "data": {"tool_name": tool_name, **details}}
        elif kind in ENDED_AS:
            self.close_children()  # ended without reporting them (cancelled or failed): their blocks first
        self.branch.write(self.display.feed(event))
        if kind == "delegation_started":
            self._open_child(details)

    def _open_child(self, details: dict[str, Any]) -> None:
        child_id, tool_name = str(details.get("child_run_id") or ""), str(details.get("tool_name"))
        if not child_id or child_id in self._children:
            return
        child = Follower(self.ctx, self.out, child_id, self.socket, depth=self.depth + 1, label=tool_name)
        thread = threading.Thread(target=child.follow_branch, daemon=True, name=f"follow-{child_id}")
        self._children[child_id] = (tool_name, thread)
        thread.start()

    def _close_child(self, child_id: str) -> str | None:
        """Waits for the child's block to end; the tool that started it (None: not followed here)."""
        followed = self._children.pop(child_id, None)
        if followed is None:
            return None
        tool_name, thread = followed
        thread.join(CHILD_END_TIMEOUT)
        return tool_name

    def close_children(self) -> None:
        """Children whose end the run did not report (it was cancelled, or it failed, meanwhile)."""
        for child_id in list(self._children):
            self._close_child(child_id)

    def follow_branch(self) -> None:
        """A child's whole stream; an error ends only its branch, said in it."""
        try:
            for event in self.events():
                self.show(event)
        except StepwiseError as exc:
            self.branch.write(f"cannot follow run {self.run_id}: {exc}\n")
        finally:
            self.close_children()
            self.branch.close()


def follow(
    ctx: Context,
    run_id: str,
    after: int = 0,
    *,
    socket: Socket | None = None,
) -> int:
    """Writes the run's events after seq `after` (and its children's, indented), then returns its exit
    code."""
    out = Output(ctx)
    root = Follower(ctx, out, run_id, socket or websocket, after=after)
    try:
        for event in root.events():
            root.show(event)
        root.close_children()
    except KeyboardInterrupt:
        ctx.note(f"\nstopped following; resume with: {ctx.cli} runs follow {run_id} --after {root.after}")
        return EXIT_INTERRUPTED
    run = data(ctx.client.runs.get(run_id))
    if ctx.json:
        out.raw(json.dumps(run, ensure_ascii=False) + "\n")
    elif root.ended_as != run.get("status"):  # its terminal event was not shown, or said less (timed_out)
        out.lines("", run_outcome(run))
    return exit_code(run)

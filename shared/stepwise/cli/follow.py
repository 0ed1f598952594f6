"""Following a run: over the follow WebSocket (`POST /v1/runs/{id}/follow`), else with the SDK's event
iterator (long polls of `GET /v1/runs/{id}/events` that resume by seq); write each event as it arrives,
and end with the run's final status as the exit code.

The socket is the cheap way (no function runs while the run waits); long-polling is the way that always
works. A socket that cannot be opened, or that ends before the run's terminal event (API Gateway closes
idle ones after 10 minutes), hands over to long-polling from the last seq received.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from stepwise.cli.client import data
from stepwise.cli.context import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, Context
from stepwise.cli.render import Display, Hints, run_outcome
from stepwise_sdk import Stepwise, StepwiseError

ENDED_AS = {"run_completed": "succeeded", "run_failed": "failed", "run_cancelled": "cancelled"}
OPEN_TIMEOUT = 10.0  # seconds to open the socket before falling back to long-polling

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


def follow(
    ctx: Context,
    run_id: str,
    after: int = 0,
    *,
    socket: Socket | None = None,
) -> int:
    """Writes the run's events after seq `after`, then returns its exit code."""
    display = Display(Hints(run_id=run_id, cli=ctx.cli))
    ended_as: str | None = None
    done = False

    def show(event: dict[str, Any]) -> None:
        nonlocal after, ended_as, done
        seq = int(event.get("seq", after))
        if seq <= after:
            return  # a socket handed over to polling (or the reverse) may overlap by an event
        if ctx.json:
            ctx.write(json.dumps(event, ensure_ascii=False) + "\n")
        else:
            ctx.write(display.feed(event))
        ended_as = ENDED_AS.get(str(event.get("type")), ended_as)
        done = done or str(event.get("type")) in ENDED_AS
        after = seq

    try:
        try:
            for event in socket_events(ctx.client, run_id, after, socket or websocket):
                show(event)
        except SocketUnavailable:
            pass
        if not done:
            for polled in ctx.client.runs.events(run_id, after=after):
                show(data(polled))
    except KeyboardInterrupt:
        ctx.note(f"\nstopped following; resume with: {ctx.cli} runs follow {run_id} --after {after}")
        return EXIT_INTERRUPTED
    run = data(ctx.client.runs.get(run_id))
    if ctx.json:
        ctx.write(json.dumps(run, ensure_ascii=False) + "\n")
    elif ended_as != run.get("status"):  # its terminal event was not shown, or said less (timed_out)
        ctx.lines(run_outcome(run))
    return exit_code(run)

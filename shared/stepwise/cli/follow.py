"""Following a run: long-poll `GET /v1/runs/{id}/events?after=N&wait=S` until the log says done, write
each event as it arrives, and end with the run's final status as the exit code."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from stepwise.cli.client import Api, ApiFailure, Unreachable
from stepwise.cli.context import EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, Context
from stepwise.cli.render import Display, Hints, run_outcome

WAIT = 20  # seconds per long poll: under API Gateway's 30 s integration timeout
ATTEMPTS = 3  # per poll: a dropped connection or a 5xx on a long poll is retried, not fatal
ENDED_AS = {"run_completed": "succeeded", "run_failed": "failed", "run_cancelled": "cancelled"}


def exit_code(run: dict[str, Any]) -> int:
    """0 when the run succeeded, 1 when it ended any other way (failed, cancelled, timed out)."""
    return EXIT_OK if run.get("status") == "succeeded" else EXIT_RUN_FAILED


def poll(
    api: Api, run_id: str, after: int, *, wait: float = WAIT, pause: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    attempt = 1
    while True:
        try:
            page: dict[str, Any] = api.call(
                "GET", f"/v1/runs/{run_id}/events", params={"after": after, "wait": wait}, timeout=wait + 30
            )
            return page
        except (Unreachable, ApiFailure) as exc:
            transient = isinstance(exc, Unreachable) or exc.status >= 500
            if not transient or attempt == ATTEMPTS:
                raise
        pause(float(attempt))
        attempt += 1


def follow(ctx: Context, run_id: str, after: int = 0, *, pause: Callable[[float], None] = time.sleep) -> int:
    """Writes the run's events after seq `after`, then returns its exit code."""
    display = Display(Hints(run_id=run_id, cli=ctx.cli))
    ended_as: str | None = None
    try:
        while True:
            page = poll(ctx.api, run_id, after, pause=pause)
            for event in page.get("events", []):
                if ctx.json:
                    ctx.write(json.dumps(event, ensure_ascii=False) + "\n")
                else:
                    ctx.write(display.feed(event))
                ended_as = ENDED_AS.get(str(event.get("type")), ended_as)
                after = max(after, int(event.get("seq", after)))
            after = max(after, int(page.get("next", after)))
            if page.get("done"):
                break
    except KeyboardInterrupt:
        ctx.note(f"\nstopped following; resume with: {ctx.cli} runs follow {run_id} --after {after}")
        return EXIT_INTERRUPTED
    run: dict[str, Any] = ctx.api.get(f"/v1/runs/{run_id}")
    if ctx.json:
        ctx.write(json.dumps(run, ensure_ascii=False) + "\n")
    elif ended_as != run.get("status"):  # its terminal event was not shown, or said less (timed_out)
        ctx.lines(run_outcome(run))
    return exit_code(run)

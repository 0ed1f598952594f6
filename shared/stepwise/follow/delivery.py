"""Sending a run's events to its followers: after every append, and a new follower's backlog.

See stepwise.follow for why the lease and the last look give each follower every event exactly once,
in order. A follower whose lease holder died is picked up by the next writer once the lease runs out.
"""

from __future__ import annotations

import json
import time

from botocore.exceptions import BotoCoreError, ClientError

from stepwise.core.observability import logger
from stepwise.follow import sockets
from stepwise.follow import store as followers
from stepwise.runs import eventlog
from stepwise.runs.ports import stores

LEASE_SECONDS = 10.0  # far above the time to post a page of events; a dead holder blocks no longer
CATCH_UP_POLL = 0.05  # a reserved event is normally written within milliseconds of its reservation


def push(tenant_id: str, run_id: str) -> None:
    """Send what was just appended to every follower of the run. Never raises for a delivery that
    failed: the events are in the log, and a follower that misses them reads them there (the CLI falls
    back to long-polling when its socket ends without the terminal event).

    Writers call this only when their reservation on the log's head found a follower counted there
    (store.events.append): most runs are never followed, and looking for followers on every append was
    a third of an event's requests. A follower is counted after its item is written, and its backlog
    catches up to the last seq reserved before it was counted; every later reservation sees the count."""
    try:
        for follower in followers.of_run(tenant_id, run_id):
            deliver(tenant_id, run_id, follower.connection_id)
    except (ClientError, BotoCoreError, sockets.Gone) as exc:
        logger.warning("could not push events to followers", extra={"run_id": run_id, "error": str(exc)})


def deliver(
    tenant_id: str, run_id: str, connection_id: str, holding: int | None = None, catch_up: int = 0
) -> None:
    """Send the follower the events after its cursor, taking its lease first unless the caller holds it
    already (`holding` is then the cursor). With `catch_up`, keep looking until the cursor reaches that
    seq: a new follower's backlog must include what writers reserved before they could see it (their
    events may still be in flight), for those writers will not push them (see `push`)."""
    sent = holding
    while True:
        if sent is None:
            now = time.time()
            sent = followers.claim(tenant_id, run_id, connection_id, now, now + LEASE_SECONDS)
            if sent is None:
                return  # its holder looks at the log again after releasing
        page = _page(tenant_id, run_id, sent)
        try:
            for event in page.events:
                sockets.post(connection_id, json.dumps(event.model_dump(mode="json"), ensure_ascii=False))
        except sockets.Gone:
            followers.remove(tenant_id, run_id, connection_id)
            return
        except ClientError:
            # A message API Gateway refuses (over its 128 KB frame limit, say) would block the cursor
            # forever: end the socket instead, and the client reads the rest from the log.
            _end(tenant_id, run_id, connection_id)
            raise
        sent = max(sent, page.next)
        if page.done:
            _end(tenant_id, run_id, connection_id)
            return
        followers.release(tenant_id, run_id, connection_id, sent)
        # The last look: anything whose writer found our lease taken was written before that.
        after = _page(tenant_id, run_id, sent)
        if not (after.events or after.done):
            if after.next >= catch_up:
                return
            # An earlier writer's events are still on their way: eventlog.page skips a hole once it
            # is HOLE_GRACE old, so this ends.
            time.sleep(CATCH_UP_POLL)
        sent = None


def _page(tenant_id: str, run_id: str, after: int) -> eventlog.EventPage:
    head = stores().events.head(tenant_id, run_id)
    if head is None:
        return eventlog.EventPage(events=[], next=after, done=False)
    return eventlog.page(tenant_id, run_id, after, head)


def _end(tenant_id: str, run_id: str, connection_id: str) -> None:
    """The server closes the socket after the run's terminal event (DESIGN)."""
    followers.remove(tenant_id, run_id, connection_id)
    sockets.close(connection_id)

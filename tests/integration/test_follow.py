"""Following a run cheaply: the event log's head item, the light events function, and the follow
WebSocket (signed single-use URLs, the backlog, pushes to the terminal event, no Lambda while waiting)."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import ClientConnection, connect

from stepwise.core import ids
from stepwise.core.schema import utcnow
from stepwise.core.tables import HEAD_SEQ, RunHeadItem, RunItem, tenant_key
from stepwise.follow import service
from stepwise.runs import events
from stepwise.store import events as log
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import OTHER_KEY, tool, wait_for_run

SCRIPT = [{"tool_calls": [{"name": "send", "arguments": {"q": "hello"}}]}, {"text": "done"}]


def new_run(stack: LocalStack, **body: Any) -> dict[str, Any]:
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "follow", **body.pop("agent", {})})
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "x", **body}
    )
    assert status == 202, accepted
    return {**accepted, "agent_id": agent["agent_id"]}


def all_events(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    """The whole log by long-polling /events to its end (its terminal event lands after the status)."""
    got: list[dict[str, Any]] = []

    def to_the_end() -> bool:
        status, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={len(got)}&wait=10")
        assert status == 200, page
        got.extend(page["events"])
        assert page["done"], page
        return True

    eventually(to_the_end, timeout=60, what=f"the end of {run_id}'s log")
    return got


def follow_url(stack: LocalStack, run_id: str, after: int = 0) -> str:
    status, _, issued = stack.invoke_api("POST", f"/v1/runs/{run_id}/follow?after={after}")
    assert status == 200, issued
    return str(issued["url"])


def receive(socket: ClientConnection, until: str | None = None) -> list[dict[str, Any]]:
    """Messages until one of type `until`, or until the server closes the socket."""
    got = []
    for message in socket:
        got.append(json.loads(message))
        if got[-1]["type"] == until:
            break
    return got


def wait_until_waiting(stack: LocalStack, run_id: str) -> None:
    eventually(
        lambda: stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]["status"] == "waiting",
        timeout=30,
        what=f"{run_id} to wait",
    )


def refusal(url: str) -> int:
    with pytest.raises(InvalidStatus) as refused:
        connect(url, open_timeout=10).close()
    return refused.value.response.status_code


# --- The head item ------------------------------------------------------------------------------


def test_seqs_are_reserved_on_the_head_item_not_on_the_run_item(stack: LocalStack) -> None:
    run = new_run(stack)
    finished = wait_for_run(stack, run["run_id"])
    seqs = [e["seq"] for e in all_events(stack, run["run_id"])]

    head = log.head(DEFAULT_TENANT, run["run_id"])
    assert head is not None and head.last_seq == seqs[-1] == len(seqs) and head.done
    item = RunItem.get(DEFAULT_TENANT, run["run_id"]).attribute_values
    assert "event_seq" not in item and finished["status"] == "succeeded"


@pytest.mark.usefixtures("stack")  # the tables live in it
def test_the_head_is_done_once_a_terminal_event_is_appended_and_takes_nothing_after() -> None:
    run_id = ids.new_id("run")
    events.emit_many(DEFAULT_TENANT, run_id, [("run_started", {}), ("step_started", {"step": 1})])
    head = log.head(DEFAULT_TENANT, run_id)
    assert head is not None and (head.last_seq, head.done) == (2, False)

    events.emit(DEFAULT_TENANT, run_id, "run_completed", {"output": "x"})
    page = events.read(DEFAULT_TENANT, run_id, after=0)
    assert [e.seq for e in page.events] == [1, 2, 3] and page.next == 3 and page.done

    # Nothing is appended after the terminal event (a step in flight at a cancel, a descendant's wait
    # mirrored after its root ended): the log stays done, so no follower waits on an ended run.
    events.emit(DEFAULT_TENANT, run_id, "approval_requested", {"interaction_id": "int_1"})
    late = events.read(DEFAULT_TENANT, run_id, after=3)
    assert late.events == [] and late.done
    head = log.head(DEFAULT_TENANT, run_id)
    assert head is not None and (head.last_seq, head.done) == (3, True)


def reserve_without_writing(run_id: str, count: int = 1, *, terminal: bool = False) -> None:
    """A writer that reserved seqs (as store.events.append does) and has not written them (yet, or ever)."""
    RunHeadItem(tenant_key(DEFAULT_TENANT, run_id), HEAD_SEQ).update(
        actions=[RunHeadItem.last_seq.add(count), RunHeadItem.done.set(terminal)]
    )


def age_head(run_id: str) -> None:
    key = tenant_key(DEFAULT_TENANT, run_id)
    RunHeadItem(key, HEAD_SEQ).update(actions=[RunHeadItem.moved_at.set(utcnow() - timedelta(minutes=1))])


@pytest.mark.usefixtures("stack")  # the tables live in it
def test_a_reader_stops_at_a_hole_until_its_writer_is_clearly_dead() -> None:
    run_id = ids.new_id("run")
    events.emit(DEFAULT_TENANT, run_id, "run_started")
    reserve_without_writing(run_id)  # seq 2 is in flight
    events.emit(DEFAULT_TENANT, run_id, "step_started", {"step": 1})  # seq 3

    page = events.read(DEFAULT_TENANT, run_id, after=0)
    assert [e.seq for e in page.events] == [1] and page.next == 1 and not page.done

    events.emit(DEFAULT_TENANT, run_id, "run_completed", {"output": "x"})  # seq 4: the log is done
    page = events.read(DEFAULT_TENANT, run_id, after=1)
    assert [e.seq for e in page.events] == [3, 4] and page.next == 4 and page.done


@pytest.mark.usefixtures("stack")  # the tables live in it
def test_seqs_reserved_long_ago_and_never_written_are_skipped() -> None:
    run_id = ids.new_id("run")
    events.emit(DEFAULT_TENANT, run_id, "run_started")
    reserve_without_writing(run_id, 2)  # a writer that died between its reservation and its write
    assert events.read(DEFAULT_TENANT, run_id, after=1).next == 1

    age_head(run_id)
    page = events.read(DEFAULT_TENANT, run_id, after=1)
    assert page.events == [] and page.next == 3 and not page.done


@pytest.mark.usefixtures("stack")  # the tables live in it
def test_a_terminal_event_reserved_long_ago_and_never_written_ends_the_log() -> None:
    run_id = ids.new_id("run")
    events.emit(DEFAULT_TENANT, run_id, "run_started")
    reserve_without_writing(run_id, terminal=True)
    assert not events.read(DEFAULT_TENANT, run_id, after=1).done

    age_head(run_id)
    page = events.read(DEFAULT_TENANT, run_id, after=1)
    assert page.events == [] and page.next == 2 and page.done


def test_the_events_of_another_tenants_run_are_404_before_and_after_its_first_event(
    stack: LocalStack,
) -> None:
    run = new_run(stack)
    status, _, body = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events", key=OTHER_KEY)
    assert status == 404 and body["error"]["code"] == "run_not_found"
    wait_for_run(stack, run["run_id"])

    for path in ("events", "stream"):
        status, _, _ = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/{path}", key=OTHER_KEY)
        assert status == 404
    status, _, body = stack.invoke_api("GET", "/v1/runs/run_doesnotexist/events?wait=1")
    assert status == 404 and body["error"]["code"] == "run_not_found"


def test_events_stream_and_follow_are_served_by_the_light_function(stack: LocalStack) -> None:
    run = new_run(stack)
    wait_for_run(stack, run["run_id"])
    before = dict(stack.lambdas.invocations)

    for method, path in (("GET", "events"), ("GET", "stream"), ("POST", "follow")):
        status, _, _ = stack.invoke_api(method, f"/v1/runs/{run['run_id']}/{path}")
        assert status == 200

    calls = {k: v - before[k] for k, v in stack.lambdas.invocations.items() if v != before[k]}
    calls.pop("AuthorizerFunction", None)  # the gateway caches its decisions
    assert calls == {"EventsFunction": 3}
    assert stack.lambdas._specs["EventsFunction"].memory <= 256


# --- The follow URL -----------------------------------------------------------------------------


def test_a_follow_url_is_signed_expiring_and_points_at_the_websocket_api(stack: LocalStack) -> None:
    run = new_run(stack)
    status, _, issued = stack.invoke_api("POST", f"/v1/runs/{run['run_id']}/follow?after=3")

    assert status == 200 and set(issued) == {"url", "expires_at"}
    assert stack.sockets is not None and issued["url"].startswith(f"{stack.sockets.url}?token=")
    left = (service.FollowUrl.model_validate(issued).expires_at - utcnow()).total_seconds()
    assert 58 <= left <= 60
    assert stack.invoke_api("POST", f"/v1/runs/{run['run_id']}/follow?after=-1")[0] == 422


def test_another_tenants_run_cannot_be_followed(stack: LocalStack) -> None:
    run = new_run(stack)

    status, _, body = stack.invoke_api("POST", f"/v1/runs/{run['run_id']}/follow", key=OTHER_KEY)

    assert status == 404 and body["error"]["code"] == "run_not_found"
    assert stack.invoke_api("POST", "/v1/runs/run_doesnotexist/follow")[0] == 404


def test_a_follow_url_works_once(stack: LocalStack) -> None:
    run = new_run(stack)
    wait_for_run(stack, run["run_id"])
    url = follow_url(stack, run["run_id"])

    with connect(url, open_timeout=10) as socket:
        assert receive(socket)[-1]["type"] == "run_completed"
    assert refusal(url) == 403


def test_a_forged_or_missing_token_is_refused(stack: LocalStack) -> None:
    run = new_run(stack)
    url = follow_url(stack, run["run_id"])
    token = parse_qs(urlsplit(url).query)["token"][0]
    base = url.split("?")[0]
    payload, signature = token.split(".")
    # The same signature over another run's claims: the MAC covers the payload.
    other = follow_url(stack, new_run(stack)["run_id"])
    other_payload = parse_qs(urlsplit(other).query)["token"][0].split(".")[0]

    assert refusal(f"{base}?token={other_payload}.{signature}") == 403
    assert refusal(f"{base}?token={payload}.{'A' * len(signature)}") == 403
    assert refusal(base) == 401


def test_an_expired_follow_url_is_refused(stack: LocalStack) -> None:
    run = new_run(stack)
    issued = service.issue(DEFAULT_TENANT, run["run_id"], 0, now=utcnow() - timedelta(seconds=61))

    assert refusal(issued.url) == 403


def test_an_approval_link_is_no_follow_url(stack: LocalStack, receiver: Receiver) -> None:
    """Both are signed with the same secret, under different MAC contexts."""
    from stepwise.approvals import links

    run = new_run(stack)
    base = follow_url(stack, run["run_id"]).split("?")[0]
    token = links.sign("int_1", DEFAULT_TENANT, utcnow() + timedelta(minutes=5), links.secret())

    assert refusal(f"{base}?token={token}") == 403


# --- Over the socket ----------------------------------------------------------------------------


def test_a_run_is_followed_over_the_socket_to_its_terminal_event_and_the_close(stack: LocalStack) -> None:
    run = new_run(stack)
    url = follow_url(stack, run["run_id"])

    with connect(url, open_timeout=10) as socket:
        received = receive(socket)  # ends when the server closes the socket
        assert socket.close_code == 1000

    assert received == all_events(stack, run["run_id"])  # exactly /events: in order, no gap, once
    assert received[-1]["type"] == "run_completed"


def test_the_backlog_after_n_comes_first(stack: LocalStack) -> None:
    run = new_run(stack)
    wait_for_run(stack, run["run_id"])
    logged = all_events(stack, run["run_id"])

    with connect(follow_url(stack, run["run_id"], after=2), open_timeout=10) as socket:
        assert receive(socket) == logged[2:]


def test_no_lambda_runs_while_a_socket_client_waits_for_an_approval(
    stack: LocalStack, receiver: Receiver
) -> None:
    run = new_run(
        stack, agent={"tools": [tool("send", f"{receiver.url}/send", permission="ask")]}, script=SCRIPT
    )
    with connect(follow_url(stack, run["run_id"]), open_timeout=10) as socket:
        waiting = receive(socket, until="approval_requested")
        wait_until_waiting(stack, run["run_id"])  # the last step of the pause has returned
        before = dict(stack.lambdas.invocations)
        time.sleep(1.5)
        assert stack.lambdas.invocations == before, "a Lambda ran while the client waited"

        status, _, _ = stack.invoke_api("POST", f"/v1/runs/{run['run_id']}/approve", {"approved": True})
        assert status == 202
        rest = receive(socket)

    assert waiting + rest == all_events(stack, run["run_id"])
    assert [e["type"] for e in rest][-1] == "run_completed"
    assert "approval_decided" in [e["type"] for e in rest]


def test_a_closed_socket_is_forgotten(stack: LocalStack) -> None:
    from stepwise.follow import store as followers

    run = new_run(
        stack, agent={"tools": [tool("send", "http://127.0.0.1:9/send", permission="ask")]}, script=SCRIPT
    )
    with connect(follow_url(stack, run["run_id"]), open_timeout=10) as socket:
        receive(socket, until="approval_requested")
        assert len(followers.of_run(DEFAULT_TENANT, run["run_id"])) == 1
    eventually(  # $disconnect removes it
        lambda: not followers.of_run(DEFAULT_TENANT, run["run_id"]), timeout=10, what="the follower to go"
    )
    stack.invoke_api("POST", f"/v1/runs/{run['run_id']}/cancel")


# --- Who looks for followers ----------------------------------------------------------------------


def test_a_writer_looks_for_followers_only_once_one_is_counted(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepwise.follow import delivery

    pushed: list[str] = []
    monkeypatch.setattr(delivery, "push", lambda tenant_id, run_id: pushed.append(run_id))
    run_id = ids.new_id("run")
    events.emit(DEFAULT_TENANT, run_id, "run_started")
    assert pushed == []  # nobody follows: no Query of the followers table

    head = log.followed(DEFAULT_TENANT, run_id)
    assert (head.last_seq, head.done) == (1, False)  # counting a follower moves no seq
    events.emit(DEFAULT_TENANT, run_id, "step_started", {"step": 1})
    assert pushed == [run_id]


def test_counting_a_follower_before_any_event_starts_an_empty_log(stack: LocalStack) -> None:
    run_id = ids.new_id("run")
    head = log.followed(DEFAULT_TENANT, run_id)
    assert (head.last_seq, head.done) == (0, False)
    events.emit(DEFAULT_TENANT, run_id, "run_started")
    page = events.read(DEFAULT_TENANT, run_id, after=0)
    assert [e.seq for e in page.events] == [1] and not page.done


def test_a_new_followers_backlog_waits_for_what_was_reserved_before_it_was_counted(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that reserved seq 2 before the follower was counted does not push it: the backlog must
    wait for it to land rather than stop at the hole and leave the socket one event short."""
    import threading

    from stepwise.core.tables import RunEventItem
    from stepwise.follow import delivery, sockets
    from stepwise.follow import store as followers

    sent: list[int] = []
    monkeypatch.setattr(sockets, "post", lambda _connection, message: sent.append(json.loads(message)["seq"]))
    run_id = ids.new_id("run")
    events.emit(DEFAULT_TENANT, run_id, "run_started")
    reserve_without_writing(run_id)  # seq 2: its writer saw no follower
    followers.add(DEFAULT_TENANT, run_id, "conn-1", sent=0, lease=time.time() + 30, now=utcnow())
    catch_up = log.followed(DEFAULT_TENANT, run_id).last_seq
    assert catch_up == 2

    backlog = threading.Thread(
        target=delivery.deliver, args=(DEFAULT_TENANT, run_id, "conn-1", 0, catch_up), daemon=True
    )
    backlog.start()
    time.sleep(0.3)
    assert sent == [1] and backlog.is_alive()  # stopped at the hole, still looking
    key = tenant_key(DEFAULT_TENANT, run_id)
    RunEventItem(key, 2, type="step_started", data={"step": 1}, at=utcnow()).save()  # the write lands
    backlog.join(timeout=10)
    assert not backlog.is_alive() and sent == [1, 2]
    assert followers.of_run(DEFAULT_TENANT, run_id)[0].sent == 2

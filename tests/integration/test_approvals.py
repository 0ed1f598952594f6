"""Durable approvals on task tokens: every answer path converges on one conditional update."""

import threading
import time
from typing import Any
from urllib.parse import urlparse

import pytest

from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import OTHER_KEY, tool, wait_for_run

SCRIPT = [{"tool_calls": [{"name": "send", "arguments": {"q": "hello"}}]}, {"text": "done"}]


def start_waiting(stack: LocalStack, receiver: Receiver, **tool_fields: Any) -> dict[str, Any]:
    """A run paused on an approval for `send`; returns the approval_requested event's data + run_id."""
    fields = {"permission": "ask", **tool_fields}
    _, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "approver", "tools": [tool("send", f"{receiver.url}/send", **fields)]}
    )
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go", "script": SCRIPT}
    )
    run_id = accepted["run_id"]

    def requested() -> dict[str, Any]:
        _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0&wait=2")
        found = [e["data"] for e in page["events"] if e["type"] == "approval_requested"]
        assert found, page
        return dict(found[0])

    return {
        **eventually(requested, timeout=30, what=f"{run_id} to ask for approval"),
        "run_id": run_id,
        "session_id": accepted["session_id"],
        "agent_id": agent["agent_id"],
    }


def link_path(approval: dict[str, Any]) -> str:
    return urlparse(approval["approval_url"]).path


def event_data(stack: LocalStack, run_id: str, etype: str) -> list[dict[str, Any]]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events")
    return [e["data"] for e in page["events"] if e["type"] == etype]


def test_a_run_waits_without_any_lambda_running_then_approval_runs_the_tool(
    stack: LocalStack, receiver: Receiver
) -> None:
    approval = start_waiting(stack, receiver)
    run_id = approval["run_id"]
    assert approval["tool_name"] == "send" and approval["arguments"] == {"q": "hello"}
    assert approval["interaction_id"] and approval["tool_call_id"] and approval["approval_url"]
    assert stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]["status"] == "waiting"

    before = dict(stack.lambdas.invocations)
    time.sleep(1.5)
    assert stack.lambdas.invocations == before, "a Lambda ran while the run was waiting"
    assert receiver.to("/send") == []

    status, _, answered = stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})
    assert status == 202 and answered["status"] == "answered"
    run = wait_for_run(stack, run_id)
    assert run["status"] == "succeeded" and run["tools_executed"] == ["send"]
    assert [r.json() for r in receiver.to("/send")] == [{"q": "hello"}]  # exactly what was approved
    (decided,) = event_data(stack, run_id, "approval_decided")
    assert decided["approved"] is True and decided["interaction_id"] == approval["interaction_id"]


def test_a_denial_is_a_tool_error_the_model_reads(stack: LocalStack, receiver: Receiver) -> None:
    approval = start_waiting(stack, receiver)

    stack.invoke_api(
        "POST", f"/v1/runs/{approval['run_id']}/approve", {"approved": False, "reason": "not today"}
    )
    run = wait_for_run(stack, approval["run_id"])

    assert run["status"] == "succeeded" and receiver.to("/send") == []
    (result,) = event_data(stack, approval["run_id"], "tool_result")
    assert result["error"]["code"] == "denied" and "not today" in result["error"]["message"]


def test_an_unanswered_approval_times_out_into_an_error_result(stack: LocalStack, receiver: Receiver) -> None:
    _, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "timeout", "tools": [tool("send", f"{receiver.url}/send")]}
    )
    hook = {"event": "PreToolUse", "type": "approval", "matcher": "send", "config": {"timeout": 1}}
    assert stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/hooks", hook)[0] == 201
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go", "script": SCRIPT}
    )

    run = wait_for_run(stack, accepted["run_id"])

    assert run["status"] == "succeeded" and receiver.to("/send") == []
    (result,) = event_data(stack, accepted["run_id"], "tool_result")
    assert result["error"]["code"] == "timeout"
    (interaction,) = stack.invoke_api("GET", f"/v1/sessions/{accepted['session_id']}/interactions")[2][
        "interactions"
    ]
    assert interaction["status"] == "expired"


def test_the_link_page_shows_the_request_and_a_get_decides_nothing(
    stack: LocalStack, receiver: Receiver
) -> None:
    approval = start_waiting(stack, receiver)

    for _ in range(3):  # a mail scanner prefetching
        status, headers, page = stack.invoke_api("GET", link_path(approval), key=None)
        assert status == 200 and headers["content-type"].startswith("text/html")
    assert "approver" in page and "send" in page and "hello" in page
    assert 'value="approve"' in page and 'value="deny"' in page
    assert stack.invoke_api("GET", f"/v1/runs/{approval['run_id']}")[2]["status"] == "waiting"

    status, _, page = stack.invoke_api(
        "POST",
        link_path(approval),
        raw=b"decision=approve",
        key=None,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert status == 200 and "approved" in page.lower()
    assert wait_for_run(stack, approval["run_id"])["status"] == "succeeded"
    assert len(receiver.to("/send")) == 1

    status, _, page = stack.invoke_api(
        "POST",
        link_path(approval),
        raw=b"decision=deny",
        key=None,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert status == 409 and "already decided" in page.lower()
    assert stack.invoke_api("GET", link_path(approval), key=None)[0] == 409


def test_forged_and_tampered_links_are_403(stack: LocalStack, receiver: Receiver) -> None:
    approval = start_waiting(stack, receiver)
    path = link_path(approval)
    tampered = path[:-2] + ("AA" if not path.endswith("AA") else "BB")

    for bad in (tampered, "/v1/approvals/garbage", "/v1/approvals/abc.def"):
        assert stack.invoke_api("GET", bad, key=None)[0] == 403
        status, _, _ = stack.invoke_api(
            "POST",
            bad,
            raw=b"decision=approve",
            key=None,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert status == 403
    assert stack.invoke_api("GET", f"/v1/runs/{approval['run_id']}")[2]["status"] == "waiting"
    stack.invoke_api("POST", f"/v1/runs/{approval['run_id']}/approve", {"approved": False})


def test_an_expired_link_is_410(stack: LocalStack, receiver: Receiver) -> None:
    from datetime import timedelta

    from stepwise.approvals import links
    from stepwise.core.schema import utcnow

    approval = start_waiting(stack, receiver)
    old = links.sign(approval["interaction_id"], "local", utcnow() - timedelta(seconds=1), links.secret())

    assert stack.invoke_api("GET", f"/v1/approvals/{old}", key=None)[0] == 410
    stack.invoke_api("POST", f"/v1/runs/{approval['run_id']}/approve", {"approved": False})
    assert wait_for_run(stack, approval["run_id"])["status"] == "succeeded"
    assert stack.invoke_api("GET", link_path(approval), key=None)[0] == 409


def test_an_api_answer_racing_a_link_answer_exactly_one_wins(stack: LocalStack, receiver: Receiver) -> None:
    approval = start_waiting(stack, receiver)
    results: list[int] = []

    def by_api() -> None:
        results.append(
            stack.invoke_api("POST", f"/v1/runs/{approval['run_id']}/approve", {"approved": True})[0]
        )

    def by_link() -> None:
        results.append(
            stack.invoke_api(
                "POST",
                link_path(approval),
                raw=b"decision=deny",
                key=None,
                headers={"content-type": "application/x-www-form-urlencoded"},
            )[0]
        )

    threads = [threading.Thread(target=f) for f in (by_api, by_link, by_api, by_link)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    run = wait_for_run(stack, approval["run_id"])
    assert run["status"] == "succeeded"
    assert len(event_data(stack, approval["run_id"], "approval_decided")) == 1
    assert len(receiver.to("/send")) in (0, 1)
    # One winner (the link's page answers 200, the API 202 since issue 29); the rest are told it was
    # already decided.
    assert sum(status in (200, 202) for status in results) == 1 and results.count(409) == 3


def test_approve_needs_a_pending_approval_and_names_ambiguity(stack: LocalStack, receiver: Receiver) -> None:
    _, _, agent = stack.invoke_api(
        "POST",
        "/v1/agents",
        {"name": "two", "tools": [tool("send", f"{receiver.url}/send", permission="ask")]},
    )
    two = [
        {
            "tool_calls": [
                {"name": "send", "arguments": {"q": "a"}},
                {"name": "send", "arguments": {"q": "b"}},
            ]
        },
        {"text": "ok"},
    ]
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go", "script": two}
    )
    run_id = accepted["run_id"]
    eventually(lambda: event_data(stack, run_id, "approval_requested"), timeout=30, what="the first approval")

    status, _, body = stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})
    pending = [
        i
        for i in stack.invoke_api(
            "GET", f"/v1/sessions/{accepted['session_id']}/interactions?status=pending"
        )[2]["interactions"]
    ]
    if len(pending) > 1:
        assert status == 409 and body["error"]["code"] == "ambiguous_approval"
    for interaction in event_data(stack, run_id, "approval_requested"):
        stack.invoke_api(
            "POST",
            f"/v1/runs/{run_id}/approve",
            {"approved": True, "tool_call_id": interaction["tool_call_id"]},
        )
    eventually(  # calls run one at a time
        lambda: len(event_data(stack, run_id, "approval_requested")) >= 2,
        timeout=30,
        what="the second approval",
    )
    for interaction in event_data(stack, run_id, "approval_requested"):
        stack.invoke_api(
            "POST",
            f"/v1/runs/{run_id}/approve",
            {"approved": True, "tool_call_id": interaction["tool_call_id"]},
        )

    assert wait_for_run(stack, run_id)["status"] == "succeeded"
    assert [r.json()["q"] for r in receiver.to("/send")] == ["a", "b"]
    status, _, body = stack.invoke_api("POST", f"/v1/runs/{run_id}/approve", {"approved": True})
    assert status == 409 and body["error"]["code"] == "already_answered"  # as respond answers it


def test_another_tenant_cannot_answer(stack: LocalStack, receiver: Receiver) -> None:
    approval = start_waiting(stack, receiver)

    assert (
        stack.invoke_api("POST", f"/v1/runs/{approval['run_id']}/approve", {"approved": True}, key=OTHER_KEY)[
            0
        ]
        == 404
    )
    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{approval['interaction_id']}/respond",
        {"answer": {"approved": True}},
        key=OTHER_KEY,
        headers={"Idempotency-Key": "k"},
    )
    assert status == 404
    assert (
        stack.invoke_api("GET", f"/v1/sessions/{approval['session_id']}/interactions", key=OTHER_KEY)[0]
        == 404
    )
    stack.invoke_api("POST", f"/v1/runs/{approval['run_id']}/approve", {"approved": False})


@pytest.mark.parametrize("approved", [True, False])
def test_the_respond_endpoint_answers_approvals_too(
    stack: LocalStack, receiver: Receiver, approved: bool
) -> None:
    approval = start_waiting(stack, receiver)

    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{approval['interaction_id']}/respond",
        {"answer": {"approved": approved}},
        headers={"Idempotency-Key": "approve-1"},
    )

    assert status == 202
    assert wait_for_run(stack, approval["run_id"])["status"] == "succeeded"
    assert len(receiver.to("/send")) == (1 if approved else 0)


def test_an_answer_whose_delivery_fails_stays_recorded_and_a_retry_delivers_it(
    stack: LocalStack, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botocore.exceptions import ClientError

    from stepwise.runs import answers

    approval = start_waiting(stack, receiver)
    real_client = answers.aws.client

    class Flaky:
        """Step Functions refusing the first SendTaskSuccess (throttled), then working again."""

        def __init__(self) -> None:
            self.inner = real_client("stepfunctions")
            self.failed = False

        def send_task_success(self, **kwargs: Any) -> Any:
            if not self.failed:
                self.failed = True
                raise ClientError(
                    {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "SendTaskSuccess"
                )
            return self.inner.send_task_success(**kwargs)

    flaky = Flaky()
    monkeypatch.setattr(
        answers.aws, "client", lambda service: flaky if service == "stepfunctions" else real_client(service)
    )
    path = f"/v1/sessions/interactions/{approval['interaction_id']}/respond"
    headers = {"Idempotency-Key": "retry-me"}

    status, _, body = stack.invoke_api("POST", path, {"answer": {"approved": True}}, headers=headers)
    assert status == 503 and body["error"]["code"] == "unavailable"
    time.sleep(1.0)
    assert (
        stack.invoke_api("GET", f"/v1/runs/{approval['run_id']}")[2]["status"] == "waiting"
    )  # recorded, not lost

    status, _, _ = stack.invoke_api("POST", path, {"answer": {"approved": True}}, headers=headers)
    assert status == 202
    assert wait_for_run(stack, approval["run_id"])["status"] == "succeeded"
    assert len(receiver.to("/send")) == 1

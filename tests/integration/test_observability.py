"""Observability on the local stack: what a run's handlers report as metrics (EMF on stdout) and log
(JSON lines from the `stepwise` logger), and that no credential reaches either.

Handlers flush their metrics as they return, which can be just after the run's status changes: tests
wait for the documents they expect, with a deadline."""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import pytest

from stepwise.core import observability
from stepwise.store import keys
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import tool, wait_for_run

API_MESSAGES = {"request", "run started"}

Lines = Callable[[], list[dict[str, Any]]]


class Stdout:
    """What the handlers printed during the test, accumulated (capsys hands each read out once)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys
        self.text = ""

    def read(self) -> str:
        self.text += self._capsys.readouterr().out
        return self.text

    def documents(self) -> list[dict[str, Any]]:
        """The EMF documents printed so far."""
        return [
            json.loads(line) for line in self.read().splitlines() if line.startswith("{") and '"_aws"' in line
        ]

    def wait_for(
        self, found: Callable[[list[dict[str, Any]]], bool], timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """The EMF documents printed so far, once `found` holds of them."""

        def printed() -> list[dict[str, Any]]:
            documents = self.documents()
            assert found(documents), f"not among the EMF documents: {documents}"
            return documents

        return eventually(printed, timeout=timeout, what="the metrics")


@pytest.fixture
def stdout(capsys: pytest.CaptureFixture[str]) -> Stdout:
    return Stdout(capsys)


@pytest.fixture
def log_lines() -> Iterator[Lines]:
    """Every line the `stepwise` logger writes during the test, parsed, at DEBUG (the most it says)."""
    handler = observability.logger.registered_handler
    stream = io.StringIO()
    previous_stream = handler.setStream(stream)  # type: ignore[attr-defined]
    previous_level = observability.logger.log_level
    observability.logger.setLevel("DEBUG")
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    observability.logger.setLevel(previous_level)
    handler.setStream(previous_stream)  # type: ignore[attr-defined]


def value(document: dict[str, Any], name: str) -> float:
    values = document.get(name, [])
    return float(sum(values)) if isinstance(values, list) else float(values)


def recorded(documents: list[dict[str, Any]], name: str, **properties: str) -> float:
    """The sum of `name` over the documents whose properties match."""
    return sum(
        value(d, name) for d in documents if name in d and all(d.get(k) == v for k, v in properties.items())
    )


def agent_with_one_tool(stack: LocalStack, receiver: Receiver, **tool_fields: Any) -> tuple[str, str]:
    name = f"lookup_{uuid.uuid4().hex[:8]}"  # a name no other test's tool calls share
    status, _, agent = stack.invoke_api(
        "POST",
        "/v1/agents",
        {"name": "observed", "tools": [tool(name, f"{receiver.url}/lookup", **tool_fields)]},
    )
    assert status == 201, agent
    return agent["agent_id"], name


def start(stack: LocalStack, agent_id: str, tool_name: str, **body: Any) -> dict[str, Any]:
    script = [{"tool_calls": [{"name": tool_name, "arguments": {"q": "paris"}}]}, {"text": "sunny"}]
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "weather?", "script": script, **body}
    )
    assert status == 202, accepted
    return dict(accepted)


# --- Metrics --------------------------------------------------------------------------------------


def test_a_run_reports_its_start_steps_tool_call_tokens_and_success(
    stack: LocalStack, receiver: Receiver, stdout: Stdout
) -> None:
    agent_id, tool_name = agent_with_one_tool(stack, receiver)

    accepted = start(stack, agent_id, tool_name)
    run = wait_for_run(stack, accepted["run_id"])

    assert run["status"] == "succeeded"
    documents = stdout.wait_for(lambda docs: recorded(docs, "RunsSucceeded") >= 1)
    assert recorded(documents, "RunsStarted") >= 1
    assert recorded(documents, "Steps") >= run["steps"] == 2
    assert recorded(documents, "ToolCalls", tool=tool_name) == 1  # exactly this run's one call
    assert recorded(documents, "InputTokens") >= run["usage"]["input_tokens"]
    assert recorded(documents, "OutputTokens") >= run["usage"]["output_tokens"]
    assert any("CachedTokens" in d for d in documents)
    for document in documents:
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "Stepwise" and directive["Dimensions"] == [["service"]]
        assert {m["Name"] for m in directive["Metrics"]} <= observability.METRIC_NAMES


def test_a_failed_run_reports_its_error_code(stack: LocalStack, receiver: Receiver, stdout: Stdout) -> None:
    agent_id, tool_name = agent_with_one_tool(stack, receiver)

    accepted = start(stack, agent_id, tool_name, max_tokens_budget=1)
    run = wait_for_run(stack, accepted["run_id"])

    assert run["status"] == "failed" and run["error"]["code"] == "budget_exceeded"
    documents = stdout.wait_for(lambda docs: recorded(docs, "RunsFailed", code="budget_exceeded") >= 1)
    assert recorded(documents, "RunsSucceeded") == 0


def test_an_approval_reports_how_long_it_waited(
    stack: LocalStack, receiver: Receiver, stdout: Stdout
) -> None:
    agent_id, tool_name = agent_with_one_tool(stack, receiver, permission="ask")
    accepted = start(stack, agent_id, tool_name)
    wait_for_approval(stack, accepted["run_id"])
    asked = time.monotonic()

    status, _, _ = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/approve", {"approved": True})
    waited = time.monotonic() - asked

    assert status == 202
    documents = stdout.wait_for(lambda docs: recorded(docs, "ApprovalWaitSeconds") > 0)
    (wait,) = [d for d in documents if "ApprovalWaitSeconds" in d]
    assert 0 < value(wait, "ApprovalWaitSeconds") < waited + 30
    assert wait_for_run(stack, accepted["run_id"])["status"] == "succeeded"


def wait_for_approval(stack: LocalStack, run_id: str) -> dict[str, Any]:
    def requested() -> dict[str, Any]:
        _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0&wait=2")
        found = [e["data"] for e in page["events"] if e["type"] == "approval_requested"]
        assert found, page
        return dict(found[0])

    return eventually(requested, timeout=30, what=f"{run_id} to ask for approval")


# --- Logs -----------------------------------------------------------------------------------------


def test_every_line_of_a_runs_steps_names_tenant_run_session_and_step(
    stack: LocalStack, receiver: Receiver, log_lines: Lines
) -> None:
    agent_id, tool_name = agent_with_one_tool(stack, receiver)

    accepted = start(stack, agent_id, tool_name)
    assert wait_for_run(stack, accepted["run_id"])["status"] == "succeeded"

    def logged() -> bool:
        lines = log_lines()
        assert any(line["message"] == "run succeeded" for line in lines), lines
        return True

    eventually(logged, timeout=10, what="the run's last line")
    # The run's lines but the API's (which started the run). Not told apart by function_name: that key
    # is process-wide, and in the local stack the API answers polls while the steps run.
    steps = [
        line
        for line in log_lines()
        if line.get("run_id") == accepted["run_id"] and line["message"] not in API_MESSAGES
    ]
    assert {line["message"] for line in steps} >= {"model step", "tool call", "run succeeded"}
    for line in steps:
        assert line["tenant_id"] == DEFAULT_TENANT, line
        assert line["session_id"] == accepted["session_id"], line
        assert line["agent_id"] == agent_id, line
        assert isinstance(line["step"], int), line
    (call,) = [line for line in steps if line["message"] == "tool call"]
    assert call["tool"] == tool_name and call["step"] == 1
    started = [line for line in log_lines() if line["message"] == "run started"]
    assert any(line.get("run_id") == accepted["run_id"] for line in started)


def test_no_log_carries_an_api_key_a_setting_value_or_an_approval_token(
    stack: LocalStack,
    receiver: Receiver,
    log_lines: Lines,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    api_key = f"sk-fresh-{uuid.uuid4().hex}"  # never seen by the authorizer's cache: it must be asked
    keys.store_key(api_key, DEFAULT_TENANT)
    bad_key = f"sk-wrong-{uuid.uuid4().hex}"
    setting = f"TEST_{uuid.uuid4().hex[:10].upper()}"
    value_ = f"exa-{uuid.uuid4().hex}"
    agent_id, tool_name = agent_with_one_tool(stack, receiver, permission="ask")
    accepted = start(stack, agent_id, tool_name)
    link = urlparse(wait_for_approval(stack, accepted["run_id"])["approval_url"]).path
    token = link.rsplit("/", 1)[-1]

    put = stack.invoke_api("PUT", f"/v1/settings/{setting}", {"value": value_}, key=api_key)
    listed = stack.invoke_api("GET", "/v1/settings", key=api_key)
    refused = stack.invoke_api("GET", "/v1/settings", key=bad_key)
    page = stack.invoke_api("GET", link, key=None)
    decided = stack.invoke_api(
        "POST",
        link,
        raw=b"decision=approve",
        key=None,
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert wait_for_run(stack, accepted["run_id"])["status"] == "succeeded"
    stack.invoke_api("DELETE", f"/v1/settings/{setting}", key=api_key)

    assert [r[0] for r in (put, listed, refused, page, decided)] == [200, 200, 401, 200, 200]
    captured = capsys.readouterr()
    deployed = [r for r in caplog.records if not r.name.startswith("moto")]  # moto is the local AWS
    logged = (
        json.dumps(log_lines())
        + captured.out
        + captured.err
        + "\n".join(logging.Formatter().format(r) for r in deployed)
    )
    for secret in (api_key, bad_key, value_, token):
        i = logged.find(secret)
        assert i < 0, logged[max(0, i - 1500) : i + 200]
    # not vacuous: the API did log each request, with its tenant and correlation id, by route template
    requests = [line for line in log_lines() if line["message"] == "request"]
    routes = {line["route"] for line in requests}
    assert {"PUT /v1/settings/{key}", "GET /v1/settings", "POST /v1/approvals/{token}"} <= routes
    for line in requests:
        assert line["correlation_id"], line
        if line["route"].startswith(("PUT /v1/settings", "GET /v1/settings")) and line["status"] == 200:
            assert line["tenant_id"] == DEFAULT_TENANT, line

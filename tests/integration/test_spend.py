"""Usage and budgets on the local stack: usage lines counted with the runs' own usage, budgets that
pause a run (and resume it when raised) or fail it, a parent's token budget over its whole tree, and
another tenant's usage and budgets out of reach. Budgets are per agent or user here: the stack's
tenant is shared with every other test, so a tenant-wide budget would reach into theirs."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stepwise.core.errors import RunStateError
from stepwise.core.schema import utcnow
from stepwise.llm.models import Usage
from stepwise.runs.state import RunContext
from stepwise.store import run_context
from stepwise.usage.lines import model_line
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import OTHER_KEY, tool, wait_for_run

# Two model steps: a call of a tool whose endpoint refuses (an error result), then the answer.
TEXT = [{"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}, {"text": "the answer"}]
LOOKUP = tool("lookup", "http://127.0.0.1:9/lookup")


def agent(stack: LocalStack, name: str, **body: Any) -> str:
    body.setdefault("tools", [LOOKUP])
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": name, **body})
    assert status == 201, created
    return str(created["agent_id"])


def start(stack: LocalStack, agent_id: str, script: list[dict[str, Any]], **body: Any) -> str:
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", "script": script, **body}
    )
    assert status == 202, accepted
    return str(accepted["run_id"])


def usage_of(stack: LocalStack, agents: set[str], group_by: str = "agent,model") -> dict[str, int]:
    status, _, body = stack.invoke_api("GET", f"/v1/usage?group_by={group_by}")
    assert status == 200, body
    rows = [r for r in body["rows"] if r.get("agent_id") in agents]
    fields = ("input_tokens", "output_tokens", "cached_tokens", "model_calls", "runs", "billable_tokens")
    return {f: sum(r[f] for r in rows) for f in fields}


def events(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0")
    return list(page["events"])


def put_budget(stack: LocalStack, scope: str, key: str | None = None, **body: Any) -> tuple[int, Any]:
    kwargs = {"key": key} if key else {}
    status, _, answer = stack.invoke_api("PUT", f"/v1/budgets/{scope}", {"period": "day", **body}, **kwargs)
    return status, answer


def test_usage_rows_equal_the_runs_usage_across_a_tree_and_a_replay(stack: LocalStack) -> None:
    child = agent(stack, "spend-child", script=TEXT)
    parent = agent(
        stack,
        "spend-parent",
        tools=[LOOKUP, {"type": "agent", "name": "ask", "description": "Ask.", "agent_id": child}],
    )
    script = [{"tool_calls": [{"name": "ask", "arguments": {"message": "hi"}}]}, {"text": "reported"}]
    run = wait_for_run(stack, start(stack, parent, script))
    assert run["status"] == "succeeded", run
    status, _, replayed = stack.invoke_api("POST", f"/v1/runs/{run['run_id']}/replay?force=true")
    assert status == 201, replayed
    again = wait_for_run(stack, replayed["run_id"])

    totals = [run["total_usage"], again["total_usage"]]
    counted = usage_of(stack, {child, parent})
    assert counted["input_tokens"] == sum(t["input_tokens"] for t in totals) > 0
    assert counted["output_tokens"] == sum(t["output_tokens"] for t in totals)
    children = [stack.invoke_api("GET", f"/v1/runs/{c}")[2] for r in (run, again) for c in r["children"]]
    assert counted["model_calls"] == sum(r["steps"] for r in (run, again, *children))
    assert counted["runs"] == 4
    # Scripted calls cache nothing: billable is plain input plus output.
    assert counted["billable_tokens"] == counted["input_tokens"] + counted["output_tokens"]
    by_day = usage_of(stack, {child, parent}, group_by="agent,day")
    assert by_day["input_tokens"] == counted["input_tokens"]


def test_a_stale_steps_write_counts_no_usage(stack: LocalStack) -> None:
    """A retried Step's first attempt, or a late one: its context write fails, and so do its counters."""
    tenant, run_id, agent_id = "local", f"run_{uuid.uuid4().hex}", f"agt_stale{uuid.uuid4().hex[:8]}"
    line = model_line(
        tenant_id=tenant,
        agent_id=agent_id,
        user_id=None,
        run_id=run_id,
        root_run_id=run_id,
        model="scripted",
        provider="scripted",
        usage=Usage(input_tokens=100, output_tokens=10),
        at=utcnow(),
        first_of_run=True,
    )
    entry = {"line": line.stored(), "budgets": [], "trees": []}
    saved = run_context.save(tenant, run_id, RunContext(unbilled=[entry]))
    assert saved.version == 1 and saved.unbilled == []
    try:
        run_context.save(tenant, run_id, RunContext(version=0, unbilled=[entry]))  # a stale version
    except RunStateError:
        pass
    else:
        raise AssertionError("a stale write must fail")
    assert usage_of(stack, {agent_id})["input_tokens"] == 100


def with_webhook(stack: LocalStack, name: str, url: str) -> str:
    """An agent whose runs' `budget_reached` is delivered to `url` (a secret is made if there is none)."""
    body = {"name": name, "tools": [LOOKUP], "webhook": {"url": url, "events": ["budget_reached"]}}
    status, _, created = stack.invoke_api("POST", "/v1/agents", body)
    if status == 422 and created["error"]["code"] == "webhook_secret_missing":
        assert stack.invoke_api("POST", "/v1/webhooks/secret")[0] in (200, 201)
        status, _, created = stack.invoke_api("POST", "/v1/agents", body)
    assert status == 201, created
    return str(created["agent_id"])


def test_a_run_pauses_at_its_agents_budget_and_resumes_when_it_is_raised(
    stack: LocalStack, receiver: Receiver
) -> None:
    budgeted = with_webhook(stack, "spend-paused", f"{receiver.url}/budget")
    free = agent(stack, "spend-free")
    status, budget = put_budget(stack, f"agent:{budgeted}", max_billable_tokens=1, on_exceed="pause")
    assert status == 200 and budget["spend"] == {"cost_usd": 0.0, "billable_tokens": 0}, budget

    run_id = start(stack, budgeted, TEXT)

    def parked() -> dict[str, Any]:
        _, _, run = stack.invoke_api("GET", f"/v1/runs/{run_id}")
        assert run["status"] == "waiting", run
        return dict(run)

    eventually(parked, timeout=30, what="the run to wait on its budget")
    (reached,) = [e["data"] for e in events(stack, run_id) if e["type"] == "budget_reached"]
    assert reached["budget"] == f"agent:{budgeted}" and reached["limit"] == "max_billable_tokens"
    assert reached["max_billable_tokens"] == 1 and reached["spend"]["billable_tokens"] > 1
    (delivered, *_) = eventually(lambda: receiver.to("/budget"), what="the budget_reached webhook")
    payload = json.loads(delivered.body)
    assert payload["type"] == "budget_reached" and payload["data"]["budget"] == f"agent:{budgeted}"
    status, _, refused = stack.invoke_api("POST", f"/v1/runs/{run_id}/resume")
    assert status == 409 and refused["error"]["code"] == "budget_exceeded", refused
    _, _, listed = stack.invoke_api("GET", "/v1/budgets")
    (shown,) = [b for b in listed["budgets"] if b["scope"] == f"agent:{budgeted}"]
    assert shown["spend"]["billable_tokens"] == reached["spend"]["billable_tokens"]

    status, raised = put_budget(stack, f"agent:{budgeted}", max_billable_tokens=10**9, on_exceed="pause")
    assert status == 200, raised
    resumed = wait_for_run(stack, run_id)
    unpaused = wait_for_run(stack, start(stack, free, TEXT))

    assert resumed["status"] == unpaused["status"] == "succeeded", resumed
    assert resumed["output"] == unpaused["output"] == "the answer"
    assert resumed["usage"]["input_tokens"] == unpaused["usage"]["input_tokens"]
    assert "run_resumed" in [e["type"] for e in events(stack, run_id)]
    status, _, not_paused = stack.invoke_api("POST", f"/v1/runs/{run_id}/resume")
    assert status == 409 and not_paused["error"]["code"] == "run_not_paused"


def test_a_fail_budget_ends_the_run_budget_exceeded(stack: LocalStack) -> None:
    agent_id = agent(stack, "spend-fail")
    user = f"spender-{uuid.uuid4().hex[:8]}"
    status, _ = put_budget(stack, f"user:{user}", max_billable_tokens=1, on_exceed="fail", soft_limit_pct=50)
    assert status == 200

    run = wait_for_run(stack, start(stack, agent_id, TEXT, user_id=user))

    assert run["status"] == "failed" and run["error"]["code"] == "budget_exceeded", run
    assert run["steps"] == 1  # the first call spent past it; the second was never made
    assert [e["type"] for e in events(stack, run["run_id"])].count("budget_warning") == 0
    status, _, gone = stack.invoke_api("DELETE", f"/v1/budgets/user:{user}")
    assert status == 204, gone
    status, _, missing = stack.invoke_api("GET", f"/v1/budgets/user:{user}")
    assert status == 404 and missing["error"]["code"] == "budget_not_found"


def test_a_soft_limit_warns_once_per_period(stack: LocalStack) -> None:
    agent_id = agent(stack, "spend-soft")
    status, _ = put_budget(stack, f"agent:{agent_id}", max_billable_tokens=1000, soft_limit_pct=1)
    assert status == 200  # warned from 10 tokens on: the first run's second step crosses it

    runs = [wait_for_run(stack, start(stack, agent_id, TEXT)) for _ in range(2)]

    assert [r["status"] for r in runs] == ["succeeded", "succeeded"]
    warned = [e["data"] for r in runs for e in events(stack, r["run_id"]) if e["type"] == "budget_warning"]
    assert len(warned) == 1 and warned[0]["run_id"] == runs[0]["run_id"], warned
    assert warned[0]["budget"] == f"agent:{agent_id}" and warned[0]["soft_limit_pct"] == 1


def test_a_parents_token_budget_stops_a_tree_whose_children_spend(stack: LocalStack) -> None:
    looping = [{"tool_calls": [{"name": "lookup", "arguments": {"q": str(i)}}]} for i in range(8)]
    child = agent(stack, "spend-looping-child", script=[*looping, {"text": "finally"}], max_steps=20)
    parent = agent(
        stack,
        "spend-budgeted-parent",
        tools=[LOOKUP, {"type": "agent", "name": "ask", "description": "Ask.", "agent_id": child}],
    )
    script = [{"tool_calls": [{"name": "ask", "arguments": {"message": "hi"}}]}, {"text": "reported"}]
    free = wait_for_run(stack, start(stack, parent, script))
    assert free["status"] == "succeeded"
    budget = free["usage"]["input_tokens"] + free["usage"]["output_tokens"] + 400  # far below the tree's

    run = wait_for_run(stack, start(stack, parent, script, max_tokens_budget=budget))

    (child_id,) = run["children"]
    _, _, stopped = stack.invoke_api("GET", f"/v1/runs/{child_id}")
    assert stopped["status"] == "failed" and stopped["error"]["code"] == "budget_exceeded", stopped
    assert run["status"] == "failed" and run["error"]["code"] == "budget_exceeded", run
    assert run["total_usage"]["input_tokens"] + run["total_usage"]["output_tokens"] <= budget
    assert free["total_usage"]["input_tokens"] > budget


def test_another_tenants_usage_and_budgets_are_never_readable(stack: LocalStack) -> None:
    agent_id = agent(stack, "spend-private")
    assert put_budget(stack, f"agent:{agent_id}", max_billable_tokens=10**6)[0] == 200
    run_id = start(stack, agent_id, [{"text": "mine"}])
    wait_for_run(stack, run_id)

    status, _, rows = stack.invoke_api("GET", "/v1/usage?group_by=agent", key=OTHER_KEY)
    assert status == 200 and agent_id not in [r.get("agent_id") for r in rows["rows"]]
    status, _, listed = stack.invoke_api("GET", "/v1/budgets", key=OTHER_KEY)
    assert status == 200 and f"agent:{agent_id}" not in [b["scope"] for b in listed["budgets"]]
    for method, path in (
        ("GET", f"/v1/budgets/agent:{agent_id}"),
        ("DELETE", f"/v1/budgets/agent:{agent_id}"),
        ("POST", f"/v1/runs/{run_id}/resume"),
    ):
        status, _, refused = stack.invoke_api(method, path, key=OTHER_KEY)
        assert status == 404, (method, path, refused)
    status, refused = put_budget(stack, f"agent:{agent_id}", key=OTHER_KEY, max_billable_tokens=5)
    assert status == 404 and refused["error"]["code"] == "agent_not_found"


def test_bad_usage_and_budget_input_is_a_clear_400_or_422(stack: LocalStack) -> None:
    status, _, bad = stack.invoke_api("GET", "/v1/usage?group_by=agent,model,day")
    assert status == 400 and bad["error"]["code"] == "invalid_group_by"
    status, _, bad = stack.invoke_api("GET", "/v1/usage?from=yesterday")
    assert status == 400 and bad["error"]["code"] == "invalid_range"
    status, bad = put_budget(stack, "team:x", max_billable_tokens=5)
    assert status == 400 and bad["error"]["code"] == "invalid_scope"
    status, bad = put_budget(stack, "user:someone")
    assert status == 422, bad


@pytest.fixture
def exa(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fake Exa: a query of "fail" answers 500, anything else one result."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            failing = body.get("query") == "fail"
            reply = json.dumps(
                {"error": "down"} if failing else {"results": [{"title": "t", "url": "https://e.x"}]}
            )
            self.send_response(500 if failing else 200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply.encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("EXA_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    yield
    server.shutdown()


def test_web_search_bills_the_mode_sent_and_not_a_5xx(stack: LocalStack, exa: None) -> None:
    from stepwise.settings.accessor import invalidate

    assert stack.invoke_api("PUT", "/v1/settings/EXA_API_KEY", {"value": "exa-secret"})[0] == 200
    invalidate("local")
    pinned = agent(
        stack, "spend-search-pinned", tools=[{"name": "web_search", "config": {"search_type": "deep"}}]
    )
    free = agent(stack, "spend-search-free", tools=[{"name": "web_search"}])

    def search(query: str, search_type: str = "auto") -> dict[str, Any]:
        return {"name": "web_search", "arguments": {"query": query, "search_type": search_type}}

    script = [{"tool_calls": [search("runtimes"), search("fail")]}, {"text": "done"}]
    assert wait_for_run(stack, start(stack, pinned, script))["status"] == "succeeded"
    script = [
        {"tool_calls": [search("runtimes", "deep-reasoning")]},
        {"tool_calls": [search("x"), search("y")]},
        {"text": "ok"},
    ]
    assert wait_for_run(stack, start(stack, free, script))["status"] == "succeeded"

    _, _, body = stack.invoke_api("GET", "/v1/usage?group_by=agent,tool")
    billed = {
        (r["agent_id"], r["tool"]): r for r in body["rows"] if r["agent_id"] in (pinned, free) and r["tool"]
    }
    assert {k: (r["tool_calls"], r["cost_usd"]) for k, r in billed.items()} == {
        (pinned, "web_search_deep"): (1, 0.015),  # the pinned mode, whatever the model asked; the 5xx free
        (free, "web_search_deep_reasoning"): (1, 0.03),
        (free, "web_search"): (2, 0.01),  # two lines of one step, one counter
    }


def test_the_reconcilers_sweep_resumes_a_run_its_budget_now_allows(stack: LocalStack) -> None:
    from stepwise.core.tables import BudgetItem, bind
    from stepwise.usage import service

    agent_id = agent(stack, "spend-swept")
    assert put_budget(stack, f"agent:{agent_id}", max_billable_tokens=1)[0] == 200
    run_id = start(stack, agent_id, TEXT)
    eventually(
        lambda: stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]["status"] == "waiting",
        what="the run to park on its budget",
    )
    # As when a period turns: the budget allows the run again, and nothing told the run.
    bind()
    BudgetItem("local", f"budget#agent:{agent_id}").update(
        actions=[BudgetItem.max_billable_tokens.set(10**9)]
    )
    assert service.sweep(limit=1000) >= 1

    run = wait_for_run(stack, run_id)
    assert run["status"] == "succeeded" and run["output"] == "the answer"


def test_a_synchronous_run_over_its_budget_fails_instead_of_waiting(stack: LocalStack) -> None:
    agent_id = agent(stack, "spend-sync")
    assert put_budget(stack, f"agent:{agent_id}", max_billable_tokens=1)[0] == 200
    wait_for_run(stack, start(stack, agent_id, [{"text": "spends past it"}]))

    status, _, refused = stack.invoke_api("POST", f"/v1/agents/{agent_id}/run", {"message": "hi"})

    assert status == 422 and refused["error"]["code"] == "budget_exceeded", refused

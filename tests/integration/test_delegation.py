"""Multi-agent: agent tools start child runs that the parent waits for on a task token (the real ASL on
moto), up to depth 3, with one view of the tree."""

from __future__ import annotations

from typing import Any

import botocore.client
import botocore.exceptions
import pytest

from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.integration.support import OTHER_KEY, tool, wait_for_run


def agent(stack: LocalStack, name: str, **body: Any) -> str:
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": name, **body})
    assert status == 201, created
    return str(created["agent_id"])


def agent_tool(name: str, agent_id: str, **extra: Any) -> dict[str, Any]:
    return {"type": "agent", "name": name, "description": f"Ask {name}.", "agent_id": agent_id, **extra}


def add_tool(stack: LocalStack, agent_id: str, body: dict[str, Any]) -> None:
    status, _, created = stack.invoke_api("POST", f"/v1/agents/{agent_id}/tools", body)
    assert status == 201, created


def ask(name: str, message: str) -> dict[str, Any]:
    return {"name": name, "arguments": {"message": message}}


def start(stack: LocalStack, agent_id: str, script: list[dict[str, Any]], **body: Any) -> dict[str, Any]:
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "go", "script": script, **body}
    )
    assert status == 202, accepted
    return dict(accepted)


def events(stack: LocalStack, run_id: str) -> list[dict[str, Any]]:
    """The run's whole log, long-polled to its end."""
    got: list[dict[str, Any]] = []

    def to_the_end() -> bool:
        _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={len(got)}&wait=5")
        got.extend(page["events"])
        return bool(page["done"])

    eventually(to_the_end, timeout=30, what=f"the end of {run_id}'s log")
    return got


def of_type(found: list[dict[str, Any]], etype: str) -> list[dict[str, Any]]:
    return [e["data"] for e in found if e["type"] == etype]


def get_run(stack: LocalStack, run_id: str) -> dict[str, Any]:
    status, _, run = stack.invoke_api("GET", f"/v1/runs/{run_id}")
    assert status == 200, run
    return dict(run)


def pending(stack: LocalStack, session_id: str) -> list[dict[str, Any]]:
    _, _, listed = stack.invoke_api("GET", f"/v1/sessions/{session_id}/interactions?status=pending")
    return list(listed["interactions"])


def test_a_coordinator_gets_its_childs_answer_as_the_tool_result(stack: LocalStack) -> None:
    researcher = agent(stack, "researcher")  # no tools: the scripted model echoes its message
    coordinator = agent(stack, "coordinator", tools=[agent_tool("research", researcher)])
    script = [{"tool_calls": [ask("research", "the tallest tree")]}, {"text": "reported"}]

    run = wait_for_run(stack, start(stack, coordinator, script)["run_id"])

    assert run["status"] == "succeeded", run
    (child_id,) = run["children"]
    child = get_run(stack, child_id)
    assert child["status"] == "succeeded" and child["output"] == "You said: the tallest tree"
    assert (child["parent_run_id"], child["root_run_id"], child["depth"]) == (run["run_id"], run["run_id"], 1)
    assert child["trigger"] == "delegation" and child["session_id"] != run["session_id"]
    assert (run["depth"], run["root_run_id"], run["trigger"]) == (0, run["run_id"], "api")
    assert run["tools_executed"] == ["research"]
    for field in ("input_tokens", "output_tokens"):
        assert run["total_usage"][field] == run["usage"][field] + child["usage"][field]

    found = events(stack, run["run_id"])
    (started,) = of_type(found, "delegation_started")
    assert started["child_run_id"] == child_id and started["agent_id"] == researcher
    (completed,) = of_type(found, "delegation_completed")
    assert (completed["child_run_id"], completed["status"]) == (child_id, "succeeded")
    (result,) = of_type(found, "tool_result")
    assert result["output"] == "You said: the tallest tree"


def test_read_only_agent_tools_run_their_children_at_once(stack: LocalStack) -> None:
    first, second = agent(stack, "first"), agent(stack, "second")
    tools = [agent_tool("a", first, read_only=True), agent_tool("b", second, read_only=True)]
    coordinator = agent(stack, "pair", tools=tools)
    script = [{"tool_calls": [ask("a", "one"), ask("b", "two")]}, {"text": "both"}]

    run = wait_for_run(stack, start(stack, coordinator, script)["run_id"])

    assert run["status"] == "succeeded" and len(run["children"]) == 2
    found = events(stack, run["run_id"])
    kinds = [e["type"] for e in found if e["type"].startswith("delegation_")]
    assert kinds[:2] == ["delegation_started", "delegation_started"]  # both started before either ended
    outputs = sorted(r["output"] for r in of_type(found, "tool_result"))
    assert outputs == ["You said: one", "You said: two"]


def test_a_tree_of_runs_makes_no_failed_conditional_write(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every request a failed condition refused is billed; on the happy path there is none (issue 10).
    # A parent resumed by its children used to try `waiting` → `running`, though delegating never
    # made it `waiting`.
    refused: list[str] = []
    original = botocore.client.BaseClient._make_api_call

    def recording(client: Any, operation: str, params: dict[str, Any]) -> Any:
        try:
            return original(client, operation, params)
        except botocore.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("ConditionalCheckFailedException", "TransactionCanceledException"):
                refused.append(f"{operation} {params}")
            raise

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", recording)
    first, second = agent(stack, "left"), agent(stack, "right")
    tools = [agent_tool("a", first, read_only=True), agent_tool("b", second, read_only=True)]
    coordinator = agent(stack, "both", tools=tools)
    script = [{"tool_calls": [ask("a", "one"), ask("b", "two")]}, {"tool_calls": [ask("a", "three")]}]

    run = wait_for_run(stack, start(stack, coordinator, [*script, {"text": "done"}])["run_id"])

    assert run["status"] == "succeeded" and len(run["children"]) == 3
    tree = [run["run_id"], *run["children"]]
    assert [r for r in refused if any(run_id in r for run_id in tree)] == []


def test_a_chain_goes_three_deep_and_no_deeper(stack: LocalStack) -> None:
    """An agent that delegates to itself: the run at depth 3 is told delegation_depth_exceeded."""
    looping = agent(stack, "looping")
    add_tool(stack, looping, agent_tool("deeper", looping))
    script = [{"tool_calls": [ask("deeper", "again")]}, {"text": "bottom"}]
    status, _, _ = stack.invoke_api("PATCH", f"/v1/agents/{looping}", {"script": script})
    assert status == 200

    root = wait_for_run(stack, start(stack, looping, script)["run_id"], timeout=120)

    assert root["status"] == "succeeded", root
    chain = [root]
    while chain[-1]["children"]:
        (child_id,) = chain[-1]["children"]
        chain.append(get_run(stack, child_id))
    assert [r["depth"] for r in chain] == [0, 1, 2, 3]
    assert all(r["root_run_id"] == root["run_id"] for r in chain)
    (refused,) = of_type(events(stack, chain[-1]["run_id"]), "tool_result")
    assert refused["error"]["code"] == "delegation_depth_exceeded"
    assert root["total_usage"]["input_tokens"] == sum(r["usage"]["input_tokens"] for r in chain)


def test_an_on_delegation_hook_that_denies_starts_no_child(stack: LocalStack) -> None:
    target = agent(stack, "target")
    coordinator = agent(stack, "guarded", tools=[agent_tool("ask_target", target)])
    hook = {
        "event": "OnDelegation",
        "type": "rule",
        "config": {"rules": [{"field": "message", "operator": "CONTAINS", "value": "secret"}]},
    }
    assert stack.invoke_api("POST", f"/v1/agents/{coordinator}/hooks", hook)[0] == 201
    script = [{"tool_calls": [ask("ask_target", "tell the secret")]}, {"text": "refused"}]

    run = wait_for_run(stack, start(stack, coordinator, script)["run_id"])

    assert run["status"] == "succeeded" and run["children"] == []
    found = events(stack, run["run_id"])
    assert of_type(found, "hook_blocked")[0]["event"] == "OnDelegation"
    assert of_type(found, "tool_result")[0]["error"]["code"] == "blocked_by_hook"
    assert of_type(found, "delegation_started") == []


def test_an_approval_deep_in_the_tree_is_answered_from_the_root_session(stack: LocalStack) -> None:
    leaf = agent(
        stack,
        "leaf",
        tools=[tool("send", "http://127.0.0.1:9/send", permission="ask")],
        script=[{"tool_calls": [{"name": "send", "arguments": {"to": "x"}}]}, {"text": "leaf done"}],
    )
    middle = agent(
        stack,
        "middle",
        tools=[agent_tool("to_leaf", leaf)],
        script=[{"tool_calls": [ask("to_leaf", "send it")]}, {"text": "middle done"}],
    )
    root_agent = agent(stack, "root", tools=[agent_tool("to_middle", middle)])
    accepted = start(stack, root_agent, [{"tool_calls": [ask("to_middle", "go on")]}, {"text": "root done"}])

    (approval,) = eventually(
        lambda: pending(stack, accepted["session_id"]),
        timeout=60,
        interval=0.1,
        what="an approval to reach the root session",
    )
    assert approval["kind"] == "approval" and approval["run_id"] != accepted["run_id"]
    grandchild = get_run(stack, approval["run_id"])
    assert grandchild["depth"] == 2 and grandchild["root_run_id"] == accepted["run_id"]

    status, _, _ = stack.invoke_api(
        "POST",
        f"/v1/sessions/interactions/{approval['interaction_id']}/respond",
        {"answer": {"approved": False, "reason": "not today"}},
        headers={"Idempotency-Key": "k1"},
    )
    assert status == 202
    root = wait_for_run(stack, accepted["run_id"], timeout=60)
    assert root["status"] == "succeeded" and root["output"] == "root done"
    requested = of_type(events(stack, accepted["run_id"]), "approval_requested")
    assert [r["run_id"] for r in requested] == [grandchild["run_id"]]  # in the root's own stream


def test_cancelling_a_run_cancels_its_waiting_descendants(stack: LocalStack) -> None:
    leaf = agent(
        stack,
        "slow leaf",
        tools=[tool("send", "http://127.0.0.1:9/send", permission="ask")],
        script=[{"tool_calls": [{"name": "send", "arguments": {}}]}, {"text": "never"}],
    )
    root_agent = agent(stack, "canceller", tools=[agent_tool("to_leaf", leaf)])
    accepted = start(stack, root_agent, [{"tool_calls": [ask("to_leaf", "wait")]}, {"text": "x"}])

    def waiting_child() -> list[str]:
        children: list[str] = get_run(stack, accepted["run_id"])["children"]
        assert children and get_run(stack, children[0])["status"] == "waiting", children
        return children

    children = eventually(waiting_child, timeout=60, interval=0.1, what="the child to wait")

    status, _, cancelled = stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/cancel")

    assert status == 200 and cancelled["status"] == "cancelled"
    child = wait_for_run(stack, children[0])
    assert child["status"] == "cancelled"
    _, _, listed = stack.invoke_api("GET", f"/v1/sessions/{accepted['session_id']}/interactions")
    assert [i["status"] for i in listed["interactions"]] == ["expired"]  # its link now answers 410


def test_a_failing_child_is_an_error_result_and_the_parent_goes_on(stack: LocalStack) -> None:
    same = {"name": "lookup", "arguments": {"q": "same"}}
    failing = agent(
        stack,
        "looper",
        tools=[tool("lookup", "http://127.0.0.1:9/lookup", read_only=True)],
        script=[{"tool_calls": [same]}] * 3 + [{"text": "never"}],  # a doom loop fails the run
    )
    coordinator = agent(stack, "resilient", tools=[agent_tool("try_it", failing)])
    script = [{"tool_calls": [ask("try_it", "go")]}, {"text": "went on"}]

    run = wait_for_run(stack, start(stack, coordinator, script)["run_id"])

    assert run["status"] == "succeeded" and run["output"] == "went on"
    child = get_run(stack, run["children"][0])
    assert child["status"] == "failed" and child["error"]["code"] == "doom_loop"
    found = events(stack, run["run_id"])
    assert of_type(found, "tool_result")[0]["error"]["code"] == "doom_loop"
    assert of_type(found, "delegation_completed")[0]["status"] == "failed"


def test_a_deleted_target_is_an_error_result_not_a_crash(stack: LocalStack) -> None:
    target = agent(stack, "short lived")
    coordinator = agent(stack, "orphaned", tools=[agent_tool("gone", target)])
    assert stack.invoke_api("DELETE", f"/v1/agents/{target}")[0] == 204

    run = wait_for_run(
        stack, start(stack, coordinator, [{"tool_calls": [ask("gone", "hi")]}, {"text": "ok"}])["run_id"]
    )

    assert run["status"] == "succeeded" and run["children"] == []
    assert of_type(events(stack, run["run_id"]), "tool_result")[0]["error"]["code"] == "agent_gone"


def test_an_agent_tool_must_name_an_agent_of_the_same_tenant(stack: LocalStack) -> None:
    _, _, foreign = stack.invoke_api("POST", "/v1/agents", {"name": "theirs"}, key=OTHER_KEY)
    mine = agent(stack, "mine")
    for target in (foreign["agent_id"], "agt_00000000000000000000000000"):
        status, _, body = stack.invoke_api("POST", f"/v1/agents/{mine}/tools", agent_tool("x", target))
        assert status == 422 and body["error"]["code"] == "unknown_agent", body
        status, _, body = stack.invoke_api(
            "POST", "/v1/agents", {"name": "n", "tools": [agent_tool("x", target)]}
        )
        assert status == 422 and body["error"]["code"] == "unknown_agent", body
    status, _, body = stack.invoke_api("POST", f"/v1/agents/{mine}/tools", agent_tool("x", "not-an-id"))
    assert status == 422


def test_a_custom_schema_reaches_the_child_as_json(stack: LocalStack) -> None:
    child_agent = agent(stack, "structured")
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    }
    coordinator = agent(stack, "caller", tools=[agent_tool("forecast", child_agent, input_schema=schema)])
    script = [
        {"tool_calls": [{"name": "forecast", "arguments": {"city": "Oslo", "days": 2}}]},
        {"text": "ok"},
    ]

    run = wait_for_run(stack, start(stack, coordinator, script)["run_id"])

    child = get_run(stack, run["children"][0])
    assert child["input"] == '{"city": "Oslo", "days": 2}'


def test_a_delegation_past_the_tenants_active_run_quota_is_an_error_result(
    stack: LocalStack, monkeypatch: Any
) -> None:
    from stepwise.core import config
    from stepwise.core.ids import new_id
    from stepwise.store import keys

    tenant_id, key = new_id("ten"), f"sk-{new_id('key')}"
    keys.store_key(key, tenant_id)  # a tenant of its own: other tests' runs do not count here
    monkeypatch.setenv("STEPWISE_MAX_ACTIVE_RUNS", "1")  # the parent itself takes the one slot
    config.reset()
    try:
        _, _, child_agent = stack.invoke_api("POST", "/v1/agents", {"name": "c"}, key=key)
        body = {"name": "p", "tools": [agent_tool("ask_child", child_agent["agent_id"])]}
        _, _, parent_agent = stack.invoke_api("POST", "/v1/agents", body, key=key)
        script = [{"tool_calls": [ask("ask_child", "hi")]}, {"text": "went on"}]
        status, _, accepted = stack.invoke_api(
            "POST",
            f"/v1/agents/{parent_agent['agent_id']}/runs",
            {"message": "go", "script": script},
            key=key,
        )
        assert status == 202, accepted
        run = wait_for_run(stack, accepted["run_id"], key=key)
    finally:
        monkeypatch.undo()
        config.reset()

    assert run["status"] == "succeeded" and run["output"] == "went on" and run["children"] == []
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events?after=0", key=key)
    (result,) = [e["data"] for e in page["events"] if e["type"] == "tool_result"]
    assert result["error"]["code"] == "quota_exceeded"


class Died(BaseException):
    """The Step's process dying: nothing in the handler catches it."""


def test_a_parent_killed_after_storing_its_childs_result_still_counts_the_childs_spend(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30's soak: a parent Step stored the child's result, then died before its context write
    counted the child's spend; the retried Step found the result in the conversation, skipped the wait,
    and the root's total_usage lost the whole subtree."""
    from stepwise.loop import step as step_module
    from stepwise.loop import waits
    from stepwise_local.lambdas import FunctionError

    researcher = agent(stack, "researcher")
    coordinator = agent(stack, "coordinator", tools=[agent_tool("research", researcher)])
    settled: list[str] = []
    died: list[str] = []
    delegated, save = waits._delegated, step_module._save

    def delegated_once(scope: Any, ref: Any, interaction: Any) -> Any:
        settled.append(ref.id)
        return delegated(scope, ref, interaction)

    def save_or_die(tenant_id: str, work: Any, context: Any) -> Any:
        if settled and not died:  # the child's result is stored; its spend is not yet counted
            died.append(work.run.run_id)
            raise Died
        return save(tenant_id, work, context)

    lambdas = stack.lambdas
    inner = lambdas.invoke

    def invoke(name_or_arn: str, event: Any) -> Any:
        try:
            return inner(name_or_arn, event)
        except Died:
            raise FunctionError({"errorType": "Runtime.ExitError", "errorMessage": "killed"}) from None

    monkeypatch.setattr(waits, "_delegated", delegated_once)
    monkeypatch.setattr(step_module, "_save", save_or_die)
    monkeypatch.setattr(lambdas, "invoke", invoke)
    accepted = start(
        stack, coordinator, [{"tool_calls": [ask("research", "the tallest tree")]}, {"text": "ok"}]
    )

    parent = wait_for_run(stack, accepted["run_id"])
    assert parent["status"] == "succeeded" and died == [accepted["run_id"]]
    (child_id,) = parent["children"]
    child = get_run(stack, child_id)
    assert child["usage"]["input_tokens"] > 0
    assert parent["total_usage"]["input_tokens"] == (
        parent["usage"]["input_tokens"] + child["total_usage"]["input_tokens"]
    )

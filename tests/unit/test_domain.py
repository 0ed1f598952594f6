"""Pure domain rules: ids, prompt order, failure descriptions, event ordering, auth context, models."""

import json
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from stepwise.agents.models import Agent, AgentCreate
from stepwise.api.auth import is_public, tenant_from_event
from stepwise.core.errors import Unauthorized
from stepwise.core.ids import new_id, ulid
from stepwise.core.schema import utcnow
from stepwise.llm.models import ScriptTurn
from stepwise.loop.gating import permission_for
from stepwise.loop.prompt import build_messages, tool_declarations
from stepwise.runs.eventlog import HOLE_GRACE, _contiguous
from stepwise.runs.models import RunEvent
from stepwise.runs.state import StepFailure, describe_failure
from stepwise.tools.models import HttpTool


def http_tool(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "name": name,
        "description": "d",
        "input_schema": {"type": "object", "properties": {"b": {}, "a": {}}},
        "endpoint": "https://e.example/x",
        **extra,
    }


def agent(**fields: Any) -> Agent:
    now = utcnow()
    return Agent.model_validate(
        {"name": "a", "agent_id": "agt_1", "created_at": now, "updated_at": now, **fields}
    )


def test_ids_sort_by_creation_time() -> None:
    earlier, later = ulid(1_000), ulid(2_000)
    assert len(earlier) == 26 and earlier < later
    assert new_id("run").startswith("run_")


def test_tool_declarations_are_sorted_and_byte_stable() -> None:
    a = agent(tools=[http_tool("zeta"), http_tool("alpha")])
    b = agent(tools=[http_tool("alpha"), http_tool("zeta")])
    # result_read is every tooled agent's, from the first call (stepwise.loop.prompt.tool_declarations)
    assert [d["function"]["name"] for d in tool_declarations(a)] == ["alpha", "result_read", "zeta"]
    assert json.dumps(tool_declarations(a)) == json.dumps(tool_declarations(b))


def test_the_system_prompt_comes_first_and_dangling_tool_calls_get_a_result() -> None:
    history = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}],
        },
        {"role": "user", "content": "next"},
    ]
    messages = build_messages(agent(system_prompt="sys"), history)
    assert messages[0] == {"role": "system", "content": "sys"}
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "user"]
    assert messages[3]["tool_call_id"] == "c1"


def test_a_run_s_instructions_follow_the_agent_s_system_prompt_in_the_same_message() -> None:
    history = [{"role": "user", "content": "q"}]

    with_both = build_messages(agent(system_prompt="sys"), history, "Answer in French.")
    alone = build_messages(agent(), history, "Answer in French.")
    without = build_messages(agent(system_prompt="sys"), history, None)

    # The agent's prompt stays the first bytes: a provider's cached prefix still matches its other runs.
    assert with_both[0] == {"role": "system", "content": "sys\n\nAnswer in French."}
    assert with_both[0]["content"].startswith(without[0]["content"])
    assert with_both[1:] == without[1:] == history
    assert alone == [{"role": "system", "content": "Answer in French."}, *history]


def test_an_orphan_tool_result_is_dropped() -> None:
    messages = build_messages(
        agent(), [{"role": "tool", "tool_call_id": "x", "content": "r"}, {"role": "user", "content": "q"}]
    )
    assert messages == [{"role": "user", "content": "q"}]


@pytest.mark.parametrize(
    ("failure", "code", "message"),
    [
        (
            StepFailure(
                Error="RateLimited",
                Cause=json.dumps({"errorType": "RateLimited", "errorMessage": "slow down"}),
            ),
            "rate_limited",
            "slow down",
        ),
        (
            StepFailure(
                Error="ContextTooLong",
                Cause=json.dumps({"errorType": "ContextTooLong", "errorMessage": "too big"}),
            ),
            "context_too_long",
            "too big",
        ),
        (
            StepFailure(
                Error="AgentGone", Cause=json.dumps({"errorType": "AgentGone", "errorMessage": "gone"})
            ),
            "agent_not_found",
            "gone",
        ),
        (StepFailure(Error="States.Timeout", Cause=None), "timeout", "States.Timeout"),
        (StepFailure(Error="KeyError", Cause="not json"), "internal_error", "not json"),
    ],
)
def test_failures_become_run_errors_with_stable_codes(failure: StepFailure, code: str, message: str) -> None:
    error = describe_failure(failure)
    assert (error.code, error.message) == (code, message)


def event(seq: int, age: float = 0.0) -> RunEvent:
    return RunEvent(seq=seq, type="chunk", at=utcnow() - timedelta(seconds=age))


def test_readers_stop_at_a_fresh_hole_and_skip_a_stale_one() -> None:
    assert [e.seq for e in _contiguous([event(1), event(3)], 0, run_done=False)] == [1]
    assert [e.seq for e in _contiguous([event(2)], 0, run_done=False)] == []
    assert [e.seq for e in _contiguous([event(1), event(3, HOLE_GRACE + 1)], 0, run_done=False)] == [1, 3]
    assert [e.seq for e in _contiguous([event(1), event(3)], 0, run_done=True)] == [1, 3]


def test_the_tenant_comes_only_from_the_authorizer_context() -> None:
    assert tenant_from_event({"requestContext": {"authorizer": {"lambda": {"tenant_id": "t1"}}}}) == "t1"
    for event_ in ({}, {"requestContext": {"authorizer": {"lambda": {"auth_error": "invalid_api_key"}}}}):
        with pytest.raises(Unauthorized):
            tenant_from_event(event_)


def test_public_routes_are_exactly_the_contracts() -> None:
    assert (
        is_public("/v1/health")
        and is_public("/v1/approvals/tok")
        and is_public("/v1/integrations/slack/interactions")
    )
    assert not is_public("/v1/agents") and not is_public("/v1/healthz") and not is_public("/v1/approvals")


@pytest.mark.parametrize(
    ("default", "own", "read_only", "decision"),
    [
        ("allow", "inherit", False, "allow"),
        ("deny", "inherit", False, "deny"),
        ("allow", "deny", False, "deny"),
        ("deny", "allow", False, "allow"),
        ("allow_reads", "inherit", True, "allow"),
        ("allow_reads", "inherit", False, "ask"),
    ],
)
def test_a_tools_own_permission_wins_over_the_agents_default(
    default: str, own: str, read_only: bool, decision: str
) -> None:
    a = agent(permissions={"default": default})
    assert (
        permission_for(a, HttpTool.model_validate(http_tool("t", permission=own, read_only=read_only)))
        == decision
    )


def test_agent_and_tool_validation() -> None:
    with pytest.raises(ValidationError, match="unique"):
        AgentCreate.model_validate({"name": "a", "tools": [http_tool("t"), http_tool("t")]})
    with pytest.raises(ValidationError, match="valid JSON Schema"):
        HttpTool.model_validate(http_tool("t", input_schema={"type": "nonsense"}))
    with pytest.raises(ValidationError, match="key_fields"):
        HttpTool.model_validate(http_tool("t", key_fields=["to"]))
    with pytest.raises(ValidationError, match="exactly one"):
        ScriptTurn.model_validate({})


def test_protocol_doors_are_closed_unless_opened() -> None:
    agent = AgentCreate.model_validate({"name": "a"})
    assert (agent.a2a.enabled, agent.mcp.enabled) == (False, False)
    opened = AgentCreate.model_validate({"name": "a", "a2a": {"enabled": True}})
    assert (opened.a2a.enabled, opened.mcp.enabled) == (True, False)
    with pytest.raises(ValidationError, match="extra"):
        AgentCreate.model_validate({"name": "a", "mcp": {"enabled": True, "public": True}})


def test_after_three_failed_compactions_the_model_step_stops_compacting() -> None:
    from stepwise.loop.model_call import MAX_COMPACTION_FAILURES, _fit
    from stepwise.runs.state import RunContext

    context = RunContext(compaction_failures=MAX_COMPACTION_FAILURES)
    huge = [{"role": "user", "content": "x " * 200_000}]

    fitted, after, anew = _fit("t1", "run_1", context, "scripted", huge, [], tokens=None)

    assert fitted is huge and not anew  # sent as is: no events, no store calls
    assert after.compaction_failures == MAX_COMPACTION_FAILURES and after.compacted is None


def test_ids_made_one_after_another_sort_in_that_order_within_a_millisecond() -> None:
    # Times are kept to the millisecond (utcnow), so ties in time are common: the id breaks them in the
    # order things were made (ULID's monotonic mode).
    made = [new_id("mem") for _ in range(2_000)]

    assert made == sorted(made) and len(set(made)) == len(made)

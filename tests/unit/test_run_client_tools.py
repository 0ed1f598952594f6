"""A run's own client tools (a protocol door's caller brings them: AG-UI's `tools`): the loop declares
them beside the agent's, pauses on them like on the agent's client tools, and only that run has them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from stepwise.agents.models import Agent, AgentCreate
from stepwise.core.errors import Unprocessable
from stepwise.core.schema import utcnow
from stepwise.llm.models import ScriptTurn
from stepwise.loop.step import step
from stepwise.runs import ports, start
from stepwise.runs.models import Run
from stepwise.runs.state import RunState
from stepwise.store import runs as run_store
from stepwise.tools.models import ClientTool
from tests.fakes.stores import FakeStores

T = "t1"
PICK = ClientTool(
    type="client",
    name="pick_colour",
    description="The front end shows a colour picker",
    input_schema={"type": "object", "properties": {"hint": {"type": "string"}}},
)


@pytest.fixture(autouse=True)
def _no_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")


@pytest.fixture
def fakes() -> Iterator[FakeStores]:
    fakes = FakeStores()
    with ports.using(fakes.stores()):
        yield fakes


def _run(fakes: FakeStores, client_tools: list[ClientTool]) -> Run:
    suffix = uuid.uuid4().hex[:10]
    agent_id, session_id, run_id = f"agt_{suffix}", f"ses_{suffix}", f"run_{suffix}"
    fakes.agents.create(T, agent_id, AgentCreate(name="helper", model="scripted/x"))
    fakes.sessions.create(T, session_id, agent_id, active_run_id=run_id)
    script = [{"tool_calls": [{"name": "pick_colour", "arguments": {"hint": "sky"}}]}, {"text": "Blue."}]
    run = Run(
        run_id=run_id,
        agent_id=agent_id,
        session_id=session_id,
        status="queued",
        input="Pick a colour",
        script=[ScriptTurn.model_validate(turn) for turn in script],
        client_tools=[t.model_dump() for t in client_tools],
        created_at=utcnow(),
    )
    return fakes.runs.create(T, run)


def test_a_runs_client_tool_pauses_the_run_like_the_agents_own(fakes: FakeStores) -> None:
    run = _run(fakes, [PICK])

    paused = step(RunState(tenant_id=T, run_id=run.run_id, max_steps=run.max_steps))

    assert paused.action == "wait" and paused.wait is not None
    assert paused.wait.kind == "client_tool"
    assert fakes.interactions.get(T, paused.wait.interaction_id).tool_name == "pick_colour"
    assert fakes.agents.get(T, run.agent_id).tools == []  # the agent itself is unchanged


def test_without_it_the_same_call_names_an_unknown_tool(fakes: FakeStores) -> None:
    run = _run(fakes, [])

    after = step(RunState(tenant_id=T, run_id=run.run_id, max_steps=run.max_steps))

    assert after.action != "wait"  # refused as an unknown tool: an error result, and the model goes on
    assert fakes.interactions.for_run(T, run.run_id, "pending") == []


def test_the_run_record_keeps_its_client_tools_and_never_shows_them() -> None:
    run = Run(
        run_id="run_x",
        agent_id="agt_x",
        session_id="ses_x",
        status="queued",
        input="hi",
        client_tools=[PICK.model_dump()],
        created_at=utcnow(),
    )

    stored = run_store._to_model(run_store._new_item(T, run))

    assert stored.client_tools == [PICK.model_dump()]
    assert "client_tools" not in run.public()


def test_a_runs_client_tool_may_not_shadow_the_agents_or_another() -> None:
    agent = Agent.model_validate(
        {
            "agent_id": "agt_x",
            "name": "helper",
            "tools": [PICK.model_dump()],
            "created_at": utcnow(),
            "updated_at": utcnow(),
        }
    )
    other = PICK.model_copy(update={"name": "other"})

    with pytest.raises(Unprocessable) as shadowed:
        start._check_client_tools(agent, [PICK.model_dump()])
    with pytest.raises(Unprocessable) as twice:
        start._check_client_tools(agent.model_copy(update={"tools": []}), [other.model_dump()] * 2)

    assert (shadowed.value.code, shadowed.value.details) == ("tool_name_conflict", {"names": ["pick_colour"]})
    assert twice.value.details == {"names": ["other"]}
    start._check_client_tools(agent, [other.model_dump()])  # a name of its own is fine

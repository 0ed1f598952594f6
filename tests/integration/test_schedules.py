"""Schedules and EventBridge triggers on the local stack: the API, the twin in moto's EventBridge
Scheduler, the local firing of due schedules, and at-least-once deliveries that start one run each."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from stepwise.schedules.service import SCHEDULED_TIME
from stepwise.schedules.triggers import event_run_id, iso, schedule_run_id
from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.integration.support import OTHER_KEY, wait_for_run

TENANT = "local"


@pytest.fixture
def clock(stack: LocalStack) -> Iterator[LocalStack]:
    """The stack with its background ticker off: the test says what time it is, with fire_due(now).
    Afterwards every twin is deleted, so no schedule of these tests fires during another test."""
    stack.scheduler.stop()
    yield stack
    scheduler = boto3.client("scheduler")
    group = stack.resolver.physical["ScheduleGroup"]
    for page in scheduler.get_paginator("list_schedules").paginate(GroupName=group):
        for found in page["Schedules"]:
            scheduler.delete_schedule(GroupName=group, Name=found["Name"])
    stack.scheduler.start()


def create_agent(stack: LocalStack) -> str:
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "scheduled"})
    assert status == 201, agent
    return str(agent["agent_id"])


def create_schedule(stack: LocalStack, agent_id: str, **body: Any) -> dict[str, Any]:
    status, _, schedule = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/schedules", {"message": "Send the daily report.", **body}
    )
    assert status == 201, schedule
    return dict(schedule)


def agent_runs(stack: LocalStack, agent_id: str) -> list[dict[str, Any]]:
    status, _, page = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")
    assert status == 200, page
    return list(page["runs"])


def twin(stack: LocalStack, schedule_id: str) -> dict[str, Any]:
    """The schedule's twin in (moto's) EventBridge Scheduler."""
    found: dict[str, Any] = boto3.client("scheduler").get_schedule(
        Name=schedule_id, GroupName=stack.resolver.physical["ScheduleGroup"]
    )
    return found


def delivery(stack: LocalStack, schedule_id: str, when: datetime) -> dict[str, Any]:
    """What Scheduler delivers for `when`: the twin's Input with the scheduled time filled in."""
    template = twin(stack, schedule_id)["Target"]["Input"]
    payload: dict[str, Any] = json.loads(template.replace(SCHEDULED_TIME, iso(when)))
    return payload


def deliver(stack: LocalStack, payload: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = stack.lambdas.invoke("SchedulerFunction", payload)
    return result


# --- The API ------------------------------------------------------------------------------------


def test_create_list_and_delete_a_schedule(clock: LocalStack) -> None:
    agent_id = create_agent(clock)

    schedule = create_schedule(
        clock, agent_id, expression="cron(0 9 ? * MON-FRI *)", timezone="Europe/Paris", enabled=True
    )
    status, _, listed = clock.invoke_api("GET", f"/v1/agents/{agent_id}/schedules")

    assert schedule["schedule_id"].startswith("sch_")
    assert schedule["agent_id"] == agent_id
    assert schedule["expression"] == "cron(0 9 ? * MON-FRI *)"
    assert schedule["timezone"] == "Europe/Paris"
    assert schedule["message"] == "Send the daily report."
    assert schedule["enabled"] is True
    next_run = datetime.fromisoformat(schedule["next_run"])
    assert next_run > datetime.fromisoformat(schedule["created_at"])
    assert next_run.astimezone(UTC).hour in (7, 8)  # 09:00 in Paris, summer or winter
    assert status == 200
    assert listed == {"schedules": [schedule]}

    status, _, body = clock.invoke_api("DELETE", f"/v1/agents/{agent_id}/schedules/{schedule['schedule_id']}")
    assert (status, body) == (204, "")
    assert clock.invoke_api("GET", f"/v1/agents/{agent_id}/schedules")[2] == {"schedules": []}
    status, _, gone = clock.invoke_api("DELETE", f"/v1/agents/{agent_id}/schedules/{schedule['schedule_id']}")
    assert status == 404 and gone["error"]["code"] == "schedule_not_found"


def test_a_schedule_defaults_to_utc_and_enabled(clock: LocalStack) -> None:
    schedule = create_schedule(clock, create_agent(clock), expression="rate(1 hour)")

    assert schedule["timezone"] == "UTC" and schedule["enabled"] is True
    assert schedule["next_run"] == schedule["created_at"]  # a rate delivers at once, then every hour


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"expression": "cron(0 9 * * * *)"}, "exactly one of day-of-month and day-of-week must be '?'"),
        ({"expression": "cron(0 9 * * ?)"}, "cron() takes 6 fields"),
        ({"expression": "rate(1 minutes)"}, "rate(1 minute)"),
        ({"expression": "cron(0 9 ? * L *)"}, "a bare L is not supported"),
        ({"expression": "at(2001-01-01T09:00:00)"}, "is in the past"),
        ({"expression": "every day"}, "is not a schedule expression"),
        ({"expression": "rate(1 hour)", "timezone": "Mars/Olympus_Mons"}, "not an IANA time zone"),
        ({"expression": "rate(1 hour)", "message": ""}, "at least 1 character"),
        ({"expression": "rate(1 hour)", "every": "day"}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_schedules_are_422_with_the_reason(
    clock: LocalStack, body: dict[str, Any], says: str
) -> None:
    agent_id = create_agent(clock)

    status, _, error = clock.invoke_api("POST", f"/v1/agents/{agent_id}/schedules", {"message": "hi", **body})

    assert status == 422
    assert error["error"]["code"] == "validation_error"
    assert says in json.dumps(error["error"]["details"])
    assert clock.invoke_api("GET", f"/v1/agents/{agent_id}/schedules")[2] == {"schedules": []}


def test_another_tenants_agent_and_schedules_are_404(clock: LocalStack) -> None:
    agent_id = create_agent(clock)
    schedule = create_schedule(clock, agent_id, expression="rate(1 day)")
    path = f"/v1/agents/{agent_id}/schedules"

    created = clock.invoke_api("POST", path, {"expression": "rate(1 day)", "message": "x"}, key=OTHER_KEY)
    listed = clock.invoke_api("GET", path, key=OTHER_KEY)
    deleted = clock.invoke_api("DELETE", f"{path}/{schedule['schedule_id']}", key=OTHER_KEY)

    assert [created[0], listed[0], deleted[0]] == [404, 404, 404]
    assert created[2]["error"]["code"] == listed[2]["error"]["code"] == "agent_not_found"
    owned = clock.invoke_api("GET", path)[2]["schedules"]
    assert [s["schedule_id"] for s in owned] == [schedule["schedule_id"]], "the owner's is untouched"
    assert twin(clock, schedule["schedule_id"])["State"] == "ENABLED"


def test_a_schedule_of_another_agent_or_unknown_is_404(clock: LocalStack) -> None:
    agent_id, other_agent = create_agent(clock), create_agent(clock)
    schedule = create_schedule(clock, agent_id, expression="rate(1 day)")

    wrong_agent = clock.invoke_api("DELETE", f"/v1/agents/{other_agent}/schedules/{schedule['schedule_id']}")
    unknown = clock.invoke_api("DELETE", f"/v1/agents/{agent_id}/schedules/sch_nope")
    no_agent = clock.invoke_api("GET", "/v1/agents/agt_nope/schedules")

    assert [wrong_agent[0], unknown[0], no_agent[0]] == [404, 404, 404]
    assert twin(clock, schedule["schedule_id"])


# --- The twin in EventBridge Scheduler ------------------------------------------------------------


def test_a_schedule_has_a_twin_in_eventbridge_scheduler(clock: LocalStack) -> None:
    agent_id = create_agent(clock)
    schedule = create_schedule(clock, agent_id, expression="cron(30 8 * * ? *)", timezone="Asia/Tokyo")

    found = twin(clock, schedule["schedule_id"])

    assert found["ScheduleExpression"] == "cron(30 8 * * ? *)"
    assert found["ScheduleExpressionTimezone"] == "Asia/Tokyo"
    assert found["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert found["State"] == "ENABLED"
    assert found["StartDate"] == datetime.fromisoformat(schedule["created_at"])
    assert found["Target"]["Arn"] == clock.resolver.arns["SchedulerFunction"]
    assert found["Target"]["RoleArn"] == clock.resolver.arns["SchedulerInvokeRole"]
    assert json.loads(found["Target"]["Input"]) == {
        "tenant_id": TENANT,
        "agent_id": agent_id,
        "schedule_id": schedule["schedule_id"],
        "scheduled_time": "<aws.scheduler.scheduled-time>",
    }


def test_a_disabled_schedule_has_a_disabled_twin_and_no_next_run(clock: LocalStack) -> None:
    schedule = create_schedule(clock, create_agent(clock), expression="rate(5 minutes)", enabled=False)

    assert schedule["enabled"] is False and schedule["next_run"] is None
    assert twin(clock, schedule["schedule_id"])["State"] == "DISABLED"


def test_deleting_a_schedule_deletes_its_twin(clock: LocalStack) -> None:
    agent_id = create_agent(clock)
    schedule = create_schedule(clock, agent_id, expression="rate(1 day)")

    clock.invoke_api("DELETE", f"/v1/agents/{agent_id}/schedules/{schedule['schedule_id']}")

    with pytest.raises(boto3.client("scheduler").exceptions.ResourceNotFoundException):
        twin(clock, schedule["schedule_id"])


# --- Firing -------------------------------------------------------------------------------------


def test_a_due_rate_schedule_starts_one_run_however_often_it_fires(clock: LocalStack) -> None:
    agent_id = create_agent(clock)
    schedule = create_schedule(clock, agent_id, expression="rate(1 minute)")
    created = datetime.fromisoformat(schedule["created_at"])

    fired = clock.fire_due(created + timedelta(seconds=30))
    mine = [d for d in fired if d.payload["schedule_id"] == schedule["schedule_id"]]

    assert [d.scheduled_time for d in mine] == [created]
    run_id = schedule_run_id(TENANT, schedule["schedule_id"], created)
    assert mine[0].result == {"status": "started", "run_id": run_id, "reason": None}
    run = wait_for_run(clock, run_id)
    assert run["status"] == "succeeded"
    assert run["input"] == "Send the daily report."
    assert run["metadata"] == {
        "trigger": "schedule",
        "schedule_id": schedule["schedule_id"],
        "scheduled_time": iso(created),
    }

    # The same tick again: the ticker has delivered it already, and a redelivery starts nothing.
    again = clock.fire_due(created + timedelta(seconds=30))
    redelivered = deliver(clock, mine[0].payload)

    assert [d for d in again if d.payload["schedule_id"] == schedule["schedule_id"]] == []
    assert redelivered == {"status": "duplicate", "run_id": run_id, "reason": None}
    assert [r["run_id"] for r in agent_runs(clock, agent_id)] == [run_id]

    # A minute later, the next one.
    later = clock.fire_due(created + timedelta(seconds=61))
    assert [d.scheduled_time for d in later if d.payload["schedule_id"] == schedule["schedule_id"]] == [
        created + timedelta(minutes=1)
    ]
    assert len(agent_runs(clock, agent_id)) == 2


def test_a_cron_schedule_fires_at_its_wall_clock_time(clock: LocalStack) -> None:
    agent_id = create_agent(clock)
    schedule = create_schedule(clock, agent_id, expression="cron(0 9 * * ? *)", timezone="America/New_York")
    next_run = datetime.fromisoformat(schedule["next_run"])

    early = clock.fire_due(next_run - timedelta(seconds=1))
    on_time = clock.fire_due(next_run + timedelta(seconds=5))

    assert [d for d in early if d.payload["schedule_id"] == schedule["schedule_id"]] == []
    mine = [d for d in on_time if d.payload["schedule_id"] == schedule["schedule_id"]]
    assert [d.payload["scheduled_time"] for d in mine] == [iso(next_run)]
    assert wait_for_run(clock, mine[0].result["run_id"])["status"] == "succeeded"


def test_the_background_ticker_fires_due_schedules(clock: LocalStack) -> None:
    agent_id = create_agent(clock)
    create_schedule(clock, agent_id, expression="rate(1 minute)")  # due at once
    interval, clock.scheduler.interval = clock.scheduler.interval, 0.05
    clock.scheduler.start()
    try:
        eventually(lambda: agent_runs(clock, agent_id), timeout=30, what="the ticker to start a run")
    finally:
        clock.scheduler.stop()
        clock.scheduler.interval = interval
    assert len(agent_runs(clock, agent_id)) == 1


def test_a_disabled_deleted_or_orphaned_schedule_starts_nothing(clock: LocalStack) -> None:
    agent_id = create_agent(clock)
    disabled = create_schedule(clock, agent_id, expression="rate(1 minute)", enabled=False)
    deleted = create_schedule(clock, agent_id, expression="rate(1 minute)")
    now = datetime.fromisoformat(deleted["created_at"])
    deleted_payload = delivery(clock, deleted["schedule_id"], now)
    clock.invoke_api("DELETE", f"/v1/agents/{agent_id}/schedules/{deleted['schedule_id']}")

    fired = clock.fire_due(now + timedelta(seconds=30))
    outcomes = [
        deliver(clock, delivery(clock, disabled["schedule_id"], now)),  # as if Scheduler delivered anyway
        deliver(clock, deleted_payload),  # a delivery already in flight when it was deleted
    ]

    fired_ids = {d.payload["schedule_id"] for d in fired}
    assert fired_ids.isdisjoint({disabled["schedule_id"], deleted["schedule_id"]})
    assert [(o["status"], o["reason"]) for o in outcomes] == [
        ("skipped", f"schedule {disabled['schedule_id']} is disabled"),
        ("skipped", f"schedule {deleted['schedule_id']} was deleted"),
    ]
    assert agent_runs(clock, agent_id) == []


def test_a_schedule_of_a_deleted_agent_starts_nothing(clock: LocalStack) -> None:
    from stepwise.agents import store as agents

    agent_id = create_agent(clock)
    schedule = create_schedule(clock, agent_id, expression="rate(1 minute)")
    created = datetime.fromisoformat(schedule["created_at"])
    # The API deletes an agent's schedules with it; a delivery already in flight still finds it gone.
    agents.delete("local", agent_id)

    outcome = deliver(clock, delivery(clock, schedule["schedule_id"], created))

    assert (outcome["status"], outcome["reason"]) == ("skipped", f"agent {agent_id} was deleted")


# --- EventBridge rules ----------------------------------------------------------------------------


def order_event(event_id: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": event_id,
        "detail-type": "Order Placed",
        "source": "shop.orders",
        "account": "123456789012",
        "time": "2030-01-01T09:00:00Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {"order_id": "o-17", "total": 42},
    }


def test_an_eventbridge_event_delivered_twice_starts_one_run(clock: LocalStack) -> None:
    agent_id = create_agent(clock)
    event = {**order_event("ev-1"), "tenant_id": TENANT, "agent_id": agent_id}  # the rule's transformer

    first = deliver(clock, event)
    second = deliver(clock, event)

    run_id = event_run_id(TENANT, agent_id, "ev-1", datetime(2030, 1, 1, 9, tzinfo=UTC))
    assert first == {"status": "started", "run_id": run_id, "reason": None}
    assert second == {"status": "duplicate", "run_id": run_id, "reason": None}
    run = wait_for_run(clock, run_id)
    assert run["status"] == "succeeded"
    assert run["input"].startswith("EventBridge event 'Order Placed' from 'shop.orders':\n")
    assert json.loads(run["input"].split("\n", 1)[1]) == {
        "detail-type": "Order Placed",
        "source": "shop.orders",
        "detail": {"order_id": "o-17", "total": 42},
    }
    assert run["metadata"]["event_id"] == "ev-1"
    assert [r["run_id"] for r in agent_runs(clock, agent_id)] == [run_id]


def test_a_wrapped_event_is_the_same_event(clock: LocalStack) -> None:
    agent_id = create_agent(clock)
    flat = {**order_event("ev-2"), "tenant_id": TENANT, "agent_id": agent_id}
    wrapped = {"tenant_id": TENANT, "agent_id": agent_id, "event": order_event("ev-2")}

    assert deliver(clock, wrapped)["status"] == "started"
    assert deliver(clock, flat)["status"] == "duplicate"
    assert deliver(clock, {**flat, "id": "ev-3"})["status"] == "started"
    assert len(agent_runs(clock, agent_id)) == 2


def test_one_event_for_two_agents_starts_a_run_for_each(clock: LocalStack) -> None:
    agents = [create_agent(clock), create_agent(clock)]

    outcomes = [deliver(clock, {**order_event("ev-4"), "tenant_id": TENANT, "agent_id": a}) for a in agents]

    assert [o["status"] for o in outcomes] == ["started", "started"]
    assert outcomes[0]["run_id"] != outcomes[1]["run_id"]


def test_an_event_for_an_agent_of_another_tenant_starts_nothing(clock: LocalStack) -> None:
    agent_id = create_agent(clock)

    outcome = deliver(clock, {**order_event("ev-5"), "tenant_id": "other", "agent_id": agent_id})

    assert outcome["status"] == "skipped"
    assert agent_runs(clock, agent_id) == []


def test_a_payload_that_is_neither_is_an_error(clock: LocalStack) -> None:
    from stepwise_local.lambdas import FunctionError

    with pytest.raises(FunctionError) as raised:
        deliver(clock, {"hello": "world"})

    assert raised.value.payload["errorType"] == "UnknownDelivery"


def test_deleting_an_agent_deletes_its_schedules(stack: LocalStack) -> None:
    import boto3

    _, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "short-lived"})
    status, _, schedule = stack.invoke_api(
        "POST",
        f"/v1/agents/{created['agent_id']}/schedules",
        {"expression": "rate(1 hour)", "message": "tick"},
    )
    assert status == 201

    assert stack.invoke_api("DELETE", f"/v1/agents/{created['agent_id']}")[0] == 204

    names = [s["Name"] for s in boto3.client("scheduler").list_schedules(MaxResults=100)["Schedules"]]
    assert schedule["schedule_id"] not in names

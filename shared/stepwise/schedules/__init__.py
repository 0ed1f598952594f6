"""Triggers: schedules and EventBridge events start agents with nobody at a keyboard.

Schedules. `POST /v1/agents/{agent_id}/schedules` takes `{expression, timezone?, message, enabled?}`.
The expression is EventBridge Scheduler's (`rate(...)`, `cron(...)` with six fields, `at(...)`; the
subset and its rules are in `expressions`), the time zone an IANA name (default UTC). The schedule is
stored in SchedulesTable and gets a twin in EventBridge Scheduler (`service`), in the stack's schedule
group, named after the schedule id, FlexibleTimeWindow OFF, that delivers to SchedulerFunction as
SchedulerInvokeRole with the Input

    {"tenant_id": ..., "agent_id": ..., "schedule_id": ...,
     "scheduled_time": "<aws.scheduler.scheduled-time>"}

(Scheduler fills in the time at each delivery). Deleting the schedule deletes its twin.

EventBridge rules. A rule of the deploying account starts an agent with an event as its input when
its target is SchedulerFunction and an input transformer adds the tenant and the agent:

    Targets:
      - Id: stepwise
        Arn: <SchedulerFunction's ARN>
        InputTransformer:
          InputTemplate: '{"tenant_id": "acme", "agent_id": "agt_...", "event": <aws.events.event.json>}'

(a flat event with `tenant_id` and `agent_id` added beside `id`, `detail-type`, `source`, `time` and
`detail` through InputPathsMap is read the same way). The tenant is in the rule, which only the
account's operators can write, never in the event. The run's message is a line naming the event's
detail-type and source, then `{detail-type, source, detail}` as JSON.

Deliveries (`triggers`). Both arrive at least once. The run id is derived from the delivery (the
schedule and its scheduled time; the event id and the agent) with the ULID shape kept, so ids still
sort by time, and a second delivery of the same thing finds its run recorded and starts nothing. A
deleted or disabled schedule, or a deleted agent, starts nothing.

Locally (`local`), moto holds the twins and the local stack fires them itself, the same payload at the
same target; tests call `LocalStack.fire_due(now)`.
"""

"""`AsyncStepwise`, the asynchronous client: `_sync.py` is generated from this file."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, TypeVar

import httpx

from stepwise_sdk import _operations as op
from stepwise_sdk._core import (
    DEFAULT_TIMEOUT,
    IDEMPOTENCY_HEADER,
    Body,
    Call,
    RetryPolicy,
    check,
    headers,
    merge,
    resolve,
)
from stepwise_sdk._events import EVENT_WAIT, Cursor
from stepwise_sdk.errors import connection_error
from stepwise_sdk.models import (
    Agent,
    AgentList,
    AgentWeight,
    Budget,
    BudgetList,
    BulkCancelled,
    Comparison,
    DeliveryList,
    EffectList,
    EffectOutcome,
    EffectStatus,
    EffectView,
    EvalCasesAdded,
    EvalRunAccepted,
    EvalRunList,
    EvalRunView,
    EvalSuite,
    EvalSuiteList,
    EventPage,
    FollowUrl,
    Health,
    Hook,
    HookList,
    InteractionList,
    InteractionView,
    McpServerList,
    McpServerView,
    MemoryList,
    OpenAIResponse,
    RunAccepted,
    RunEvent,
    RunList,
    RunStatus,
    RunView,
    Schedule,
    ScheduleList,
    SessionView,
    SettingInfo,
    SettingList,
    SyncRunResult,
    Tool,
    ToolList,
    ToolUsage,
    Trigger,
    TriggerCreated,
    TriggerDeliveryList,
    TriggerList,
    TriggerSecret,
    UploadTicket,
    UsageRows,
    WebhookSecret,
    WorkflowAsl,
    WorkflowList,
    WorkflowRunAccepted,
    WorkflowSchedule,
    WorkflowScheduleList,
    WorkflowVersions,
    WorkflowView,
)

T = TypeVar("T")
RESPONSE_TIMEOUT = 40.0  # a blocking POST /v1/responses answers within 25 s of the run's start


class AsyncStepwise:
    """A client of one Stepwise API with one key.

    `base_url` and `api_key` default to STEPWISE_URL and STEPWISE_API_KEY. Failed idempotent calls are
    retried per `retries`; `transport` swaps the HTTP transport (tests use httpx.MockTransport)."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url, api_key = resolve(base_url, api_key, os.environ)
        self.retries = retries or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers(api_key, default_headers),
            timeout=timeout,
            transport=transport,
        )
        self.agents = Agents(self)
        self.runs = Runs(self)
        self.sessions = Sessions(self)
        self.interactions = Interactions(self)
        self.approvals = Approvals(self)
        self.hooks = Hooks(self)
        self.mcp_servers = McpServers(self)
        self.schedules = Schedules(self)
        self.evals = Evals(self)
        self.workflows = Workflows(self)
        self.settings = Settings(self)
        self.memories = Memories(self)
        self.uploads = Uploads(self)
        self.webhooks = Webhooks(self)
        self.responses = Responses(self)
        self.usage = UsageReader(self)
        self.budgets = Budgets(self)
        self.effects = Effects(self)

        self.triggers = Triggers(self)

    async def send(self, call: Call[T]) -> T:
        """Sends `call`, again while the retry policy allows, and parses the answer."""
        attempt = 0
        while True:
            try:
                response = await self._http.request(
                    call.operation.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    headers=call.headers,
                    timeout=call.timeout if call.timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                delay = self.retries.after_failure(call, attempt, exc)
                if delay is None:
                    raise connection_error(self.base_url, exc) from exc
            else:
                delay = self.retries.after_response(call, attempt, response)
                if delay is None:
                    return check(call, response)
                await response.aclose()
            await asyncio.sleep(delay)
            attempt += 1

    async def health(self) -> Health:
        return await self.send(op.HEALTH.call())

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncStepwise:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


class _Resource:
    def __init__(self, client: AsyncStepwise) -> None:
        self._client = client


class Agents(_Resource):
    async def create(self, body: Body = None, /, **fields: Any) -> Agent:
        """`POST /v1/agents`: `name` and any of AgentCreate's fields, as keywords or a model."""
        return await self._client.send(op.CREATE_AGENT.call(body=merge(body, fields)))

    async def list(self) -> AgentList:
        return await self._client.send(op.LIST_AGENTS.call())

    async def get(self, agent_id: str) -> Agent:
        return await self._client.send(op.GET_AGENT.call({"agent_id": agent_id}))

    async def update(self, agent_id: str, body: Body = None, /, **fields: Any) -> Agent:
        """`PATCH`: the fields given change, `None` clears an optional one, the rest stay."""
        return await self._client.send(op.UPDATE_AGENT.call({"agent_id": agent_id}, body=merge(body, fields)))

    async def delete(self, agent_id: str) -> None:
        await self._client.send(op.DELETE_AGENT.call({"agent_id": agent_id}))

    async def pause(self, agent_id: str) -> Agent:
        """New runs of the agent are refused (ConflictError `agent_paused`); its active runs go on."""
        return await self.update(agent_id, paused=True)

    async def unpause(self, agent_id: str) -> Agent:
        return await self.update(agent_id, paused=False)

    async def weight(self, agent_id: str) -> AgentWeight:
        """What the agent's first model call weighs in tokens: system prompt, tools, each tool."""
        return await self._client.send(op.AGENT_WEIGHT.call({"agent_id": agent_id}))

    async def tool_usage(self, agent_id: str, *, last: int | None = None) -> ToolUsage:
        """Which declared tools the agent's latest `last` runs called, and how often."""
        return await self._client.send(op.TOOL_USAGE.call({"agent_id": agent_id}, params={"last": last}))

    async def add_tool(self, agent_id: str, body: Body = None, /, **fields: Any) -> Tool:
        return await self._client.send(op.ADD_TOOL.call({"agent_id": agent_id}, body=merge(body, fields)))

    async def list_tools(self, agent_id: str) -> ToolList:
        return await self._client.send(op.LIST_TOOLS.call({"agent_id": agent_id}))

    async def delete_tool(self, agent_id: str, name: str) -> None:
        await self._client.send(op.DELETE_TOOL.call({"agent_id": agent_id, "name": name}))


class Runs(_Resource):
    async def create(
        self, agent_id: str, body: Body = None, /, *, idempotency_key: str | None = None, **fields: Any
    ) -> RunAccepted:
        """`POST /v1/agents/{agent_id}/runs` with `message` and RunCreate's other fields. It carries an
        Idempotency-Key (a new one unless given), so a retry after a lost answer starts no second run."""
        key = idempotency_key or f"sdk-{uuid.uuid4()}"
        return await self._client.send(
            op.CREATE_RUN.call(
                {"agent_id": agent_id}, body=merge(body, fields), headers={IDEMPOTENCY_HEADER: key}
            )
        )

    async def run(self, agent_id: str, body: Body = None, /, **fields: Any) -> SyncRunResult:
        """`POST /v1/agents/{agent_id}/run`: one model call without tools, answered with its output."""
        return await self._client.send(op.RUN_SYNC.call({"agent_id": agent_id}, body=merge(body, fields)))

    async def list(
        self,
        *,
        agent_id: str | None = None,
        session_id: str | None = None,
        status: RunStatus | None = None,
        limit: int | None = None,
        next_token: str | None = None,
        user_id: str | None = None,
        trigger: Literal["api", "schedule", "event", "delegation", "what_if", "workflow"] | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
    ) -> RunList:
        """A page of runs, newest first; pass the page's `next_token` for the next one. `user_id`,
        `trigger`, `status` filter what is read, so a page may be short (even empty) with a token;
        `created_after` (inclusive) and `created_before` (exclusive) narrow what is read."""
        params = {
            "agent_id": agent_id,
            "session_id": session_id,
            "status": status,
            "limit": limit,
            "next_token": next_token,
            "user_id": user_id,
            "trigger": trigger,
            # a datetime goes as RFC 3339 (one with no zone is read as UTC by the API)
            "created_after": created_after.isoformat()
            if isinstance(created_after, datetime)
            else created_after,
            "created_before": (
                created_before.isoformat() if isinstance(created_before, datetime) else created_before
            ),
        }
        return await self._client.send(op.LIST_RUNS.call(params=params))

    async def get(self, run_id: str) -> RunView:
        return await self._client.send(op.GET_RUN.call({"run_id": run_id}))

    async def cancel(self, run_id: str) -> RunView:
        return await self._client.send(op.CANCEL_RUN.call({"run_id": run_id}))

    async def resume(self, run_id: str) -> RunView:
        """Resume a run its budget paused; 409 `budget_exceeded` while the budget still stops it."""
        return await self._client.send(op.RESUME_RUN.call({"run_id": run_id}))

    async def cancel_many(self, body: Body = None, /, **fields: Any) -> BulkCancelled:
        """The kill switch: cancels every active run that matches `agent_id`, `user_id`, `status`,
        `created_before` (none: all of them). `continuing` means the rest go on in the background."""
        return await self._client.send(op.CANCEL_RUNS.call(body=merge(body, fields)))

    async def replay(self, run_id: str, *, force: bool = False) -> RunAccepted:
        """A new run on `run_id`'s input; ConflictError when it could repeat a side effect, unless
        `force`; GoneError when the input is no longer stored."""
        params = {"force": True} if force else None
        return await self._client.send(op.REPLAY_RUN.call({"run_id": run_id}, params=params))

    async def what_if(self, run_id: str, body: Body = None, /, **fields: Any) -> RunView:
        """A what-if replay of the finished run `run_id` under the overrides given (`model`,
        `system_prompt`, `tools`, `temperature`, `max_steps`, `agent_id`; `match`, `live_reads`): its
        tool calls are served from the original's record, no effect is performed, nothing waits."""
        return await self._client.send(op.WHAT_IF.call({"run_id": run_id}, body=merge(body, fields)))

    async def compare(self, run_id: str, other_run_id: str) -> Comparison:
        """Two runs side by side: trajectories, answers, counters with deltas, the first divergence."""
        ids = {"run_id": run_id, "other_run_id": other_run_id}
        return await self._client.send(op.COMPARE_RUNS.call(ids))

    async def webhooks(self, run_id: str) -> DeliveryList:
        """The run's webhook deliveries, each with its status, attempts and recent history."""
        return await self._client.send(op.RUN_WEBHOOKS.call({"run_id": run_id}))

    async def delete_attachments(self, run_id: str) -> None:
        """Erases the run's files for good (a replay is then GoneError); ConflictError while it runs."""
        await self._client.send(op.DELETE_ATTACHMENTS.call({"run_id": run_id}))

    async def follow(self, run_id: str, *, after: int = 0) -> FollowUrl:
        """A signed single-use WebSocket URL streaming the events after `after` (see the API docs)."""
        return await self._client.send(op.FOLLOW_RUN.call({"run_id": run_id}, params={"after": after}))

    def events(self, run_id: str, *, after: int = 0, wait: float = EVENT_WAIT) -> AsyncEventStream:
        """The run's events after seq `after`, in order, each once, until its terminal event."""
        return AsyncEventStream(self._client, Cursor(run_id, after, wait))

    async def wait(self, run_id: str, *, timeout: float | None = None) -> RunView:
        """Blocks until the run has ended and returns it; WaitTimeout after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        async for _ in AsyncEventStream(self._client, Cursor(run_id, deadline=deadline)):
            pass
        return await self.get(run_id)


class AsyncEventStream(AsyncIterator[RunEvent]):
    """An iterator of a run's events that long-polls `GET /v1/runs/{id}/events`. A poll that fails on
    the way is sent again from the last seq given (`after`), so nothing repeats and nothing is lost;
    after an error the caller can also resume with `runs.events(run_id, after=stream.after)`."""

    def __init__(self, client: AsyncStepwise, cursor: Cursor) -> None:
        self._client, self._cursor = client, cursor
        self._pending: list[RunEvent] = []

    @property
    def after(self) -> int:
        return self._cursor.after

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> RunEvent:
        while not self._pending:
            if self._cursor.ended:
                raise StopAsyncIteration
            self._pending = self._cursor.take(await self._client.send(self._cursor.next_call()))
        return self._pending.pop(0)


class Sessions(_Resource):
    async def get(
        self,
        session_id: str,
        *,
        limit: int | None = None,
        next_token: str | None = None,
    ) -> SessionView:
        """The session with a page of its runs (the newest first page; `next_token` for older ones)."""
        params = {"limit": limit, "next_token": next_token}
        return await self._client.send(op.GET_SESSION.call({"session_id": session_id}, params=params))

    async def delete(self, session_id: str) -> None:
        await self._client.send(op.DELETE_SESSION.call({"session_id": session_id}))


class Interactions(_Resource):
    async def list(
        self, session_id: str, *, status: Literal["pending", "answered", "expired"] | None = None
    ) -> InteractionList:
        """The approvals and client tools a session's runs asked for."""
        call = op.LIST_INTERACTIONS.call({"session_id": session_id}, params={"status": status})
        return await self._client.send(call)

    async def respond(
        self, interaction_id: str, answer: Body, *, idempotency_key: str | None = None
    ) -> InteractionView:
        """Answers an approval (`{"approved", "reason"?}`) or a client tool (`{"tool_call_id",
        "outcome", "output"}`). The Idempotency-Key (a new one unless given) makes a retry safe: the
        same key and answer change nothing twice."""
        key = idempotency_key or f"sdk-{uuid.uuid4()}"
        call = op.RESPOND.call(
            {"interaction_id": interaction_id},
            body={"answer": answer},
            headers={IDEMPOTENCY_HEADER: key},
        )
        return await self._client.send(call)


class Approvals(_Resource):
    async def decide(
        self, run_id: str, *, approved: bool, tool_call_id: str | None = None, reason: str | None = None
    ) -> InteractionView:
        """`POST /v1/runs/{run_id}/approve`; without `tool_call_id`, the run's only pending approval."""
        body = {"approved": approved, "tool_call_id": tool_call_id, "reason": reason}
        call = op.APPROVE.call({"run_id": run_id}, body={k: v for k, v in body.items() if v is not None})
        return await self._client.send(call)

    async def approve(
        self, run_id: str, *, tool_call_id: str | None = None, reason: str | None = None
    ) -> InteractionView:
        return await self.decide(run_id, approved=True, tool_call_id=tool_call_id, reason=reason)

    async def deny(
        self, run_id: str, *, tool_call_id: str | None = None, reason: str | None = None
    ) -> InteractionView:
        return await self.decide(run_id, approved=False, tool_call_id=tool_call_id, reason=reason)


class Hooks(_Resource):
    async def create(self, agent_id: str, body: Body = None, /, **fields: Any) -> Hook:
        return await self._client.send(op.CREATE_HOOK.call({"agent_id": agent_id}, body=merge(body, fields)))

    async def list(self, agent_id: str) -> HookList:
        return await self._client.send(op.LIST_HOOKS.call({"agent_id": agent_id}))

    async def delete(self, agent_id: str, hook_id: str) -> None:
        await self._client.send(op.DELETE_HOOK.call({"agent_id": agent_id, "hook_id": hook_id}))


class McpServers(_Resource):
    async def create(self, agent_id: str, body: Body = None, /, **fields: Any) -> McpServerView:
        call = op.ADD_MCP_SERVER.call({"agent_id": agent_id}, body=merge(body, fields))
        return await self._client.send(call)

    async def list(self, agent_id: str) -> McpServerList:
        return await self._client.send(op.LIST_MCP_SERVERS.call({"agent_id": agent_id}))

    async def get(self, agent_id: str, name: str) -> McpServerView:
        return await self._client.send(op.GET_MCP_SERVER.call({"agent_id": agent_id, "name": name}))

    async def refresh(self, agent_id: str, name: str) -> McpServerView:
        return await self._client.send(op.REFRESH_MCP_SERVER.call({"agent_id": agent_id, "name": name}))

    async def authorize(self, agent_id: str, name: str) -> McpServerView:
        """A new `authorization_url` of an OAuth server for a person to open once (e.g. after its status
        became `needs_authorization`)."""
        return await self._client.send(op.AUTHORIZE_MCP_SERVER.call({"agent_id": agent_id, "name": name}))

    async def delete(self, agent_id: str, name: str) -> None:
        await self._client.send(op.DELETE_MCP_SERVER.call({"agent_id": agent_id, "name": name}))


class Schedules(_Resource):
    async def create(self, agent_id: str, body: Body = None, /, **fields: Any) -> Schedule:
        """`expression` (rate(), cron() or at()), `message`, and optionally `timezone` and `enabled`."""
        call = op.CREATE_SCHEDULE.call({"agent_id": agent_id}, body=merge(body, fields))
        return await self._client.send(call)

    async def list(self, agent_id: str) -> ScheduleList:
        return await self._client.send(op.LIST_SCHEDULES.call({"agent_id": agent_id}))

    async def delete(self, agent_id: str, schedule_id: str) -> None:
        await self._client.send(op.DELETE_SCHEDULE.call({"agent_id": agent_id, "schedule_id": schedule_id}))


class Evals(_Resource):
    """Eval suites: cases (recorded runs replayed what-if, or fresh messages) held to assertions."""

    async def create(self, body: Body = None, /, **fields: Any) -> EvalSuite:
        """`name`, `agent_id`, `cases` and `assertions` (and optionally `webhook`)."""
        return await self._client.send(op.CREATE_EVAL.call(body=merge(body, fields)))

    async def list(self) -> EvalSuiteList:
        return await self._client.send(op.LIST_EVALS.call())

    async def get(self, eval_id: str) -> EvalSuite:
        return await self._client.send(op.GET_EVAL.call({"eval_id": eval_id}))

    async def add_cases_from_runs(self, eval_id: str, body: Body = None, /, **fields: Any) -> EvalCasesAdded:
        """Recorded runs as cases, by filter (`agent_id`, `status`, `last`, `created_after`,
        `created_before`, `metadata_key`) or by `run_ids`."""
        call = op.ADD_EVAL_CASES_FROM_RUNS.call({"eval_id": eval_id}, body=merge(body, fields))
        return await self._client.send(call)

    async def run(self, eval_id: str, body: Body = None, /, **fields: Any) -> EvalRunAccepted:
        """Start an eval run: `overrides` for every case, `concurrency` (default 4)."""
        return await self._client.send(op.START_EVAL_RUN.call({"eval_id": eval_id}, body=merge(body, fields)))

    async def runs(self, eval_id: str) -> EvalRunList:
        """The suite's eval runs, newest first, without their cases."""
        return await self._client.send(op.LIST_EVAL_RUNS.call({"eval_id": eval_id}))

    async def get_run(self, eval_id: str, eval_run_id: str) -> EvalRunView:
        return await self._client.send(op.GET_EVAL_RUN.call({"eval_id": eval_id, "eval_run_id": eval_run_id}))

    async def events(self, eval_id: str, eval_run_id: str, *, after: int = 0) -> EventPage:
        call = op.EVAL_RUN_EVENTS.call(
            {"eval_id": eval_id, "eval_run_id": eval_run_id}, params={"after": after}
        )
        return await self._client.send(call)


class Workflows(_Resource):
    """Workflows of agents, compiled to Step Functions: create, publish versions, run."""

    async def create(self, body: Body = None, /, **fields: Any) -> WorkflowView:
        """`name`, `root` (a node tree), and optionally `description`, `input_schema`."""
        return await self._client.send(op.CREATE_WORKFLOW.call(body=merge(body, fields)))

    async def list(self) -> WorkflowList:
        return await self._client.send(op.LIST_WORKFLOWS.call())

    async def get(self, workflow_id: str, *, version: int | None = None) -> WorkflowView:
        call = op.GET_WORKFLOW.call({"workflow_id": workflow_id}, params={"version": version})
        return await self._client.send(call)

    async def publish(self, workflow_id: str, body: Body = None, /, **fields: Any) -> WorkflowView:
        """A new version: the whole definition again."""
        call = op.PUBLISH_WORKFLOW.call({"workflow_id": workflow_id}, body=merge(body, fields))
        return await self._client.send(call)

    async def versions(self, workflow_id: str) -> WorkflowVersions:
        return await self._client.send(op.LIST_WORKFLOW_VERSIONS.call({"workflow_id": workflow_id}))

    async def asl(self, workflow_id: str, *, version: int | None = None) -> WorkflowAsl:
        """The compiled state machine definition."""
        call = op.GET_WORKFLOW_ASL.call({"workflow_id": workflow_id}, params={"version": version})
        return await self._client.send(call)

    async def delete(self, workflow_id: str) -> None:
        await self._client.send(op.DELETE_WORKFLOW.call({"workflow_id": workflow_id}))

    async def run(self, workflow_id: str, body: Body = None, /, **fields: Any) -> WorkflowRunAccepted:
        """Start a workflow run: `input`, and optionally `version`, `user_id`, `webhook`. Follow it with
        `runs.wait(run_id)` and `runs.events(run_id)` (node_started, node_completed, node_failed)."""
        call = op.RUN_WORKFLOW.call({"workflow_id": workflow_id}, body=merge(body, fields))
        return await self._client.send(call)

    async def schedule(self, workflow_id: str, body: Body = None, /, **fields: Any) -> WorkflowSchedule:
        """A schedule that starts a workflow run on `input` at each firing: `expression` (EventBridge
        Scheduler's `rate(...)`, `cron(...)`, `at(...)`), and optionally `timezone`, `input`, `enabled`."""
        call = op.CREATE_WORKFLOW_SCHEDULE.call({"workflow_id": workflow_id}, body=merge(body, fields))
        return await self._client.send(call)

    async def schedules(self, workflow_id: str) -> WorkflowScheduleList:
        return await self._client.send(op.LIST_WORKFLOW_SCHEDULES.call({"workflow_id": workflow_id}))

    async def unschedule(self, workflow_id: str, schedule_id: str) -> None:
        call = op.DELETE_WORKFLOW_SCHEDULE.call({"workflow_id": workflow_id, "schedule_id": schedule_id})
        await self._client.send(call)


class UsageReader(_Resource):
    async def read(
        self, *, start: str | None = None, end: str | None = None, group_by: str | None = None
    ) -> UsageRows:
        """`GET /v1/usage`: rows from `start` to `end` (ISO dates or date-times; `end`'s day included
        whole), grouped by one or two of day, hour, agent, model, user, tool (comma-separated)."""
        params = {"from": start, "to": end, "group_by": group_by}
        return await self._client.send(op.READ_USAGE.call(params=params))


class Budgets(_Resource):
    """Budgets by scope: `tenant`, `agent:<agent_id>` or `user:<user_id>`."""

    async def set(self, scope: str, body: Body = None, /, **fields: Any) -> Budget:
        """`period` (day or month) and max_cost_usd and/or max_billable_tokens; optionally
        `soft_limit_pct`, `on_exceed` (pause or fail) and `count_keys` (all or deployment)."""
        return await self._client.send(op.PUT_BUDGET.call({"scope": scope}, body=merge(body, fields)))

    async def list(self) -> BudgetList:
        return await self._client.send(op.LIST_BUDGETS.call())

    async def get(self, scope: str) -> Budget:
        return await self._client.send(op.GET_BUDGET.call({"scope": scope}))

    async def delete(self, scope: str) -> None:
        await self._client.send(op.DELETE_BUDGET.call({"scope": scope}))


class Settings(_Resource):
    """Per-tenant secrets: values go in and never come out."""

    async def put(self, key: str, value: str, *, agent_id: str | None = None) -> SettingInfo:
        """`providers.<name>.api_key` is a model provider's key that model calls use instead of the
        deployment's; with `agent_id` it is that agent's own, used before the tenant's."""
        params = {"agent_id": agent_id} if agent_id else None
        call = op.PUT_SETTING.call({"key": key}, body={"value": value}, params=params)
        return await self._client.send(call)

    async def list(self) -> SettingList:
        return await self._client.send(op.LIST_SETTINGS.call())

    async def delete(self, key: str, *, agent_id: str | None = None) -> None:
        params = {"agent_id": agent_id} if agent_id else None
        await self._client.send(op.DELETE_SETTING.call({"key": key}, params=params))


class Memories(_Resource):
    """What an agent with memory remembers, per end user (the runs' `user_id`)."""

    async def list(
        self, agent_id: str, *, user_id: str, limit: int | None = None, next_token: str | None = None
    ) -> MemoryList:
        """A page of `user_id`'s memories, newest first; pass the page's `next_token` for the next one."""
        params = {"user_id": user_id, "limit": limit, "next_token": next_token}
        return await self._client.send(op.LIST_MEMORIES.call({"agent_id": agent_id}, params=params))

    async def delete(self, agent_id: str, memory_id: str, *, user_id: str) -> None:
        """Deletes one of `user_id`'s memories; NotFoundError for one that is not theirs."""
        call = op.DELETE_MEMORY.call(
            {"agent_id": agent_id, "memory_id": memory_id}, params={"user_id": user_id}
        )
        await self._client.send(call)

    async def forget(self, agent_id: str, *, user_id: str) -> None:
        """Deletes everything the agent remembers about `user_id` (idempotent)."""
        await self._client.send(op.FORGET_USER.call({"agent_id": agent_id}, params={"user_id": user_id}))


class Uploads(_Resource):
    async def create(self, body: Body = None, /, **fields: Any) -> UploadTicket:
        """`POST /v1/uploads` with `name`, `content_type` and `size`: a presigned URL to PUT the bytes
        to with exactly the ticket's `headers` (not through this client, which would add its API key),
        then `runs.create(..., attachments=[{"upload_id": ticket.upload_id}])`."""
        return await self._client.send(op.CREATE_UPLOAD.call(body=merge(body, fields)))


class Webhooks(_Resource):
    async def rotate_secret(self) -> WebhookSecret:
        """A new signing secret for the tenant's deliveries, shown only in this answer; the previous one
        keeps signing beside it until `previous_valid_until`."""
        return await self._client.send(op.ROTATE_WEBHOOK_SECRET.call())


class Responses(_Resource):
    """The OpenAI Responses door, for apps that use this SDK rather than the `openai` package (which
    also streams): a response is a run, `model` is `"agent:<agent_id>"`."""

    async def create(
        self, body: Body = None, /, *, idempotency_key: str | None = None, **fields: Any
    ) -> OpenAIResponse:
        """`POST /v1/responses` (not streamed): answers once the run has ended or waits on someone, or
        after 25 s; with `background=True`, at once. It carries an Idempotency-Key (a new one unless
        given), so a retry after a lost answer starts no second run."""
        sent = merge(body, fields)
        if sent.get("stream") if isinstance(sent, Mapping) else getattr(sent, "stream", None):
            raise ValueError("stream with the openai client; this SDK reads the JSON answer")
        key = idempotency_key or f"sdk-{uuid.uuid4()}"
        call = op.CREATE_RESPONSE.call(body=sent, headers={IDEMPOTENCY_HEADER: key}, timeout=RESPONSE_TIMEOUT)
        return await self._client.send(call)

    async def retrieve(self, response_id: str) -> OpenAIResponse:
        return await self._client.send(op.GET_RESPONSE.call({"response_id": response_id}))

    async def cancel(self, response_id: str) -> OpenAIResponse:
        return await self._client.send(op.CANCEL_RESPONSE.call({"response_id": response_id}))


class Effects(_Resource):
    """The effects ledger: effects a run may or may not have performed wait for a person's word."""

    async def list(
        self,
        *,
        status: EffectStatus | None = None,
        run_id: str | None = None,
        limit: int | None = None,
        next_token: str | None = None,
    ) -> EffectList:
        """A page of entries; filters apply after the read, so follow `next_token` until it is None."""
        params = {"status": status, "run_id": run_id, "limit": limit, "next_token": next_token}
        return await self._client.send(op.LIST_EFFECTS.call(params=params))

    async def resolve(self, key: str, outcome: EffectOutcome, note: str | None = None) -> EffectView:
        """`done`: it happened (a replay answers `deduplicated`); `undone`: it did not (a replay performs
        it again). `key` as listed (`effect:<sha256>`)."""
        body = {"outcome": outcome, "note": note}
        return await self._client.send(op.RESOLVE_EFFECT.call({"key": key}, body=body))


class Triggers(_Resource):
    """Triggers: a webhook (or, later, a mailbox) starts an agent with a message rendered from the event."""

    async def create(self, body: Body = None, /, **fields: Any) -> TriggerCreated:
        """`type` ("webhook"), `target` ({"agent_id": ...}), `message` (a template such as
        "{{action}} on {{repository.full_name}}"), and optionally `session` ("new" or {"by_key": template}),
        `user_id` (a template), `enabled`, `verification`, `signature_header`, `dedupe_path`, `secret`.
        The answer's `secret` is shown only this once; the sender posts to its `url`."""
        return await self._client.send(op.CREATE_TRIGGER.call(body=merge(body, fields)))

    async def list(self) -> TriggerList:
        return await self._client.send(op.LIST_TRIGGERS.call())

    async def get(self, trigger_id: str) -> Trigger:
        return await self._client.send(op.GET_TRIGGER.call({"trigger_id": trigger_id}))

    async def update(self, trigger_id: str, body: Body = None, /, **fields: Any) -> Trigger:
        call = op.UPDATE_TRIGGER.call({"trigger_id": trigger_id}, body=merge(body, fields))
        return await self._client.send(call)

    async def delete(self, trigger_id: str) -> None:
        await self._client.send(op.DELETE_TRIGGER.call({"trigger_id": trigger_id}))

    async def rotate_secret(self, trigger_id: str, body: Body = None, /, **fields: Any) -> TriggerSecret:
        """A new secret (or the given `secret`); the old one verifies for `previous_valid_seconds` more."""
        call = op.ROTATE_TRIGGER_SECRET.call({"trigger_id": trigger_id}, body=merge(body, fields))
        return await self._client.send(call)

    async def deliveries(
        self, trigger_id: str, *, limit: int | None = None, next_token: str | None = None
    ) -> TriggerDeliveryList:
        """A page of what reached the trigger, newest first; pass `next_token` for the next page."""
        params = {"limit": limit, "next_token": next_token}
        call = op.LIST_TRIGGER_DELIVERIES.call({"trigger_id": trigger_id}, params=params)
        return await self._client.send(call)

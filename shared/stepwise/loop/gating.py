"""Gating, in the model's order: which tool a call names, whether its arguments can be used, its
permission, then PreToolUse (and for an agent tool OnDelegation) hooks. A call comes out Refused
(its error result stored), Paused (a human or the calling app must answer) or Ready to run.

An agent or workflow tool that is Ready becomes its child run's pause when the step acts on it
(`delegate`): a run of the agent, or a run of the workflow.
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

from pydantic import BaseModel

from stepwise.agents.models import Agent
from stepwise.core import ids, safejson, tracing
from stepwise.core.errors import NotFound, QuotaExceeded, Unprocessable
from stepwise.interactions.models import Interaction, NewInteraction, digest
from stepwise.loop import whatif
from stepwise.loop.calls import Executable, Gated, Paused, Ready, Refused, StepScope
from stepwise.loop.results import refuse
from stepwise.mcp.models import McpToolRef
from stepwise.runs import delegation, events
from stepwise.runs.hooks import fire
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.runs.state import CallRef, Wait
from stepwise.tools.base import ToolResult
from stepwise.tools.models import AgentTool, BuiltinTool, ClientTool, DeclaredTool, WorkflowTool
from stepwise.tools.registry import RUN_BUILTINS

DEFAULT_APPROVAL_TIMEOUT = 300
DEFAULT_CLIENT_TIMEOUT = 3600

Decision = Literal["allow", "ask", "deny"]
WaitKind = Literal["approval", "client_tool", "delegation"]


class Verdict(BaseModel):
    """What happens to a tool call before it runs."""

    action: Decision
    arguments: dict[str, Any]
    code: str | None = None  # why a call was refused, as the model reads it
    message: str | None = None
    timeout: int | None = None  # seconds an approval may wait
    channels: list[dict[str, Any]] | None = None


def resolve(agent: Agent, name: str) -> DeclaredTool | McpToolRef | None:
    """The tool a name refers to: one of the agent's own, one of its MCP servers' tools, or a run
    builtin. The agent's tools are its allowlist."""
    from stepwise import mcp  # the cached MCP tools of the agent's enabled servers (never a connection)

    found = agent.tool(name) or mcp.find(agent, name)
    if found is None and name in RUN_BUILTINS:
        denied = agent.permissions.default == "deny"
        found = BuiltinTool(name=name, permission="inherit" if denied else "allow")
    return found


def permission_for(agent: Agent, tool: DeclaredTool | McpToolRef) -> Decision:
    """A tool's own permission wins; `inherit` takes the agent's default."""
    if tool.permission != "inherit":
        return tool.permission
    default = agent.permissions.default
    if default == "allow_reads":
        return "allow" if tool.read_only else "ask"
    return default


def before_tool_use(
    tenant_id: str,
    run: Run,
    agent: Agent,
    tool: DeclaredTool | McpToolRef,
    arguments: dict[str, Any],
) -> Verdict:
    """Permission first (a denied tool calls no hook), then PreToolUse hooks, which may block, rewrite
    the arguments or ask a human; a permission of `ask` asks too."""
    permission = permission_for(agent, tool)
    if permission == "deny":
        return Verdict(
            action="deny",
            arguments=arguments,
            code="permission_denied",
            message=f"tool {tool.name} is not permitted for this agent",
        )
    decision = fire(tenant_id, run.run_id, agent, "PreToolUse", tool_name=tool.name, arguments=arguments)
    if decision.action == "deny":
        return Verdict(action="deny", arguments=arguments, code="blocked_by_hook", message=decision.message)
    arguments = decision.modified_input if decision.modified_input is not None else arguments
    if isinstance(tool, AgentTool):
        # After PreToolUse, for agent tools alone: what is about to be delegated, to whom.
        delegated = fire(
            tenant_id,
            run.run_id,
            agent,
            "OnDelegation",
            tool_name=tool.name,
            arguments={"agent_id": tool.agent_id, "message": tool.child_message(arguments)},
        )
        if delegated.action == "deny":
            return Verdict(
                action="deny", arguments=arguments, code="blocked_by_hook", message=delegated.message
            )
    if decision.action == "ask" and decision.approval is not None:
        channels = [c.model_dump(mode="json") for c in decision.approval.channels]
        return Verdict(
            action="ask", arguments=arguments, timeout=decision.approval.timeout, channels=channels
        )
    return Verdict(action=permission, arguments=arguments)


def _arguments(raw: str) -> dict[str, Any] | str:
    """The call's arguments, or why they cannot be used (the model reads it as the call's error)."""
    try:
        value = safejson.loads(raw or "{}")
    except safejson.TooDeep as exc:
        return f"arguments must be a JSON object nested at most {exc.max_depth} levels deep"
    except ValueError:
        return "arguments must be a JSON object"
    return value if isinstance(value, dict) else "arguments must be a JSON object"


def gate(scope: StepScope, ref: CallRef) -> Gated:
    """PreToolUse hooks and permission: a refusal is stored as the call's result, a call that needs a
    human or the calling app becomes a pause, an allowed one is ready to run. In a what-if run
    (`scope.replay`) a call that gets past them is served, run live or refused (stepwise.loop.whatif)."""
    gated = _gate(scope, ref)
    if isinstance(gated, Refused):
        whatif.refused(scope, ref, gated)
    return gated


def _gate(scope: StepScope, ref: CallRef) -> Gated:
    call = next((c for c in scope.assistant.get("tool_calls") or [] if c["id"] == ref.id), None)
    raw_arguments = call["function"].get("arguments", "{}") if call else "{}"
    arguments = _arguments(raw_arguments)
    data = {
        "tool_call_id": ref.id,
        "tool_name": ref.name,
        "arguments": arguments if isinstance(arguments, dict) else raw_arguments,
    }
    events.emit(scope.tenant_id, scope.run.run_id, "tool_call", data)
    tool = resolve(scope.agent, ref.name)
    if tool is None:
        return refuse(
            scope, ref, ToolResult.failure("unknown_tool", f"this agent has no tool named {ref.name!r}")
        )
    if isinstance(arguments, str):
        return refuse(scope, ref, ToolResult.failure("invalid_arguments", arguments))
    verdict = before_tool_use(scope.tenant_id, scope.run, scope.agent, tool, arguments)
    if verdict.action == "deny":
        refusal = ToolResult.failure(verdict.code or "blocked", verdict.message or f"{tool.name} was blocked")
        return refuse(scope, ref, refusal)
    asked, arguments = arguments, verdict.arguments
    if scope.replay is not None:
        return whatif.decide(scope, ref, tool, asked, arguments, human=verdict.action == "ask")
    if verdict.action == "ask":
        timeout = verdict.timeout or DEFAULT_APPROVAL_TIMEOUT
        return pause(scope, ref, "approval", arguments, timeout, verdict.channels)
    if isinstance(tool, ClientTool):
        return pause(scope, ref, "client_tool", arguments, DEFAULT_CLIENT_TIMEOUT)
    executable: Executable = tool
    return Ready(ref=ref, tool=executable, arguments=arguments)


def pause(
    scope: StepScope,
    ref: CallRef,
    kind: WaitKind,
    arguments: dict[str, Any],
    timeout: int,
    channels: Any = None,
) -> Paused | Refused:
    """The call's interaction, created once (a retried Step finds it), and the wait Await starts on.
    A delegation's child run is recorded now, so the parent's `children` always name a run."""
    run = scope.run
    new = NewInteraction(
        interaction_id=interaction_id(scope, ref, kind),
        run_id=run.run_id,
        session_id=run.session_id,
        listed_session_id=run.root_session_id,  # a descendant's waits are listed in the root's session
        agent_id=run.agent_id,
        kind=kind,
        step=scope.step,
        tool_call_id=ref.id,
        tool_call_index=ref.index,
        tool_name=ref.name,
        arguments=arguments,
        digest=digest(scope.tenant_id, ref.name, arguments),
        timeout_seconds=timeout,
        channels=channels,
    )
    interaction = stores().interactions.create(scope.tenant_id, new)
    wait = Wait(
        interaction_id=interaction.interaction_id,
        tool_call_id=ref.id,
        kind=kind,
        timeout_seconds=interaction.timeout_seconds,
    )
    if kind != "delegation":
        return Paused(ref, wait)
    try:
        if "workflow_id" in interaction.arguments:
            child = _record_workflow_run(scope.tenant_id, run, interaction).run_id
        else:
            child = delegation.record_child(scope.tenant_id, run, interaction).run_id
    except (QuotaExceeded, NotFound, Unprocessable) as exc:
        # The tenant's active runs are at their limit, the workflow is gone, or the model's input
        # does not fit its input_schema: no child, and the model reads why.
        stores().interactions.close(scope.tenant_id, interaction.interaction_id, "expired")
        return refuse(scope, ref, ToolResult.failure(exc.code, f"{exc}; no child run was started"))
    return Paused(ref, wait, child_run_id=child)


def _record_workflow_run(tenant_id: str, parent: Run, interaction: Interaction) -> Run:
    """A workflow tool's child: a workflow run recorded once (its id derived from the interaction, as
    a delegated run's is, so a retried Step finds it), started by Await like any delegated run."""
    from stepwise.runs.models import RunExists
    from stepwise.workflows import starting
    from stepwise.workflows.models import WorkflowRunCreate

    run_id = delegation.child_run_id(interaction)
    with contextlib.suppress(NotFound):
        return stores().runs.get(tenant_id, run_id)  # a retried Step: recorded before
    arguments = interaction.arguments
    body = WorkflowRunCreate(
        input=dict(arguments.get("input") or {}), version=arguments.get("version"), user_id=parent.user_id
    )
    try:
        return starting.record(
            tenant_id,
            str(arguments["workflow_id"]),
            body,
            run_id=run_id,
            parent=parent,
            parent_interaction_id=interaction.interaction_id,
        )
    except RunExists:
        return stores().runs.get(tenant_id, run_id)


def interaction_id(scope: StepScope, ref: CallRef, kind: str) -> str:
    """Derived from the call, so a retried Step finds the interaction it created before. A delegation
    may follow an approval of the same call, so its id differs in the ULID part."""
    run = scope.run
    base = run.run_id.removeprefix("run_")
    if kind == "delegation":
        base = ids.derived_id("int", run.created_at, run.run_id, str(scope.step), str(ref.index), kind)[4:]
    return f"int_{base}_{scope.step}_{ref.index}"


def delegate(scope: StepScope, ready: Ready) -> Paused | Refused:
    """An allowed agent-tool call: the pause its child run fills (Await records and starts the child),
    or the error result that stops it here. Its span is the parent of the child run's (by the
    interaction's id, which both derive)."""
    ref = ready.ref
    span_id = interaction_id(scope, ref, "delegation")
    with tracing.tool_span(
        scope.tenant_id, scope.run, scope.step, ref.name, ref.id, delegation=span_id
    ) as span:
        outcome = _delegate(scope, ready)
        if isinstance(outcome, Refused) and outcome.error is not None:  # refused here: no child
            tracing.tool_failed(span, outcome.error)
        return outcome


def _delegate(scope: StepScope, ready: Ready) -> Paused | Refused:
    tool, ref = ready.tool, ready.ref
    assert isinstance(tool, (AgentTool, WorkflowTool))
    if scope.run.depth >= delegation.MAX_DEPTH:
        return refuse(
            scope,
            ref,
            ToolResult.failure(
                "delegation_depth_exceeded",
                f"this run is {scope.run.depth} delegations below its root, the most there may be: "
                "answer without delegating",
            ),
        )
    if isinstance(tool, WorkflowTool):
        # The workflow run is recorded with the pause (its input checked against the workflow's
        # input_schema there); Await starts it, and its ending resumes this run.
        workflow = {"workflow_id": tool.workflow_id, "input": ready.arguments, "version": tool.version}
        return pause(scope, ref, "delegation", workflow, delegation.DELEGATION_TIMEOUT)
    try:
        delegate_agent = stores().agents.get(scope.tenant_id, tool.agent_id)
    except NotFound:
        gone = ToolResult.failure("agent_gone", f"the agent behind {tool.name} no longer exists")
        return refuse(scope, ref, gone)
    if delegate_agent.paused:  # a paused agent starts no run, a child run included
        paused = ToolResult.failure("agent_paused", f"the agent behind {tool.name} is paused")
        return refuse(scope, ref, paused)
    arguments = {"agent_id": tool.agent_id, "message": tool.child_message(ready.arguments)}
    return pause(scope, ref, "delegation", arguments, delegation.DELEGATION_TIMEOUT)

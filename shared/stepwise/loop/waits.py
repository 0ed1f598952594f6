"""Waits that are over, settled in the Step after them: an answer decides the call (an approved call
runs with exactly the approved arguments), a delegation's child hands back its outcome, and without
an answer the deadline passed (a late answer that wins the race against the expiry still counts)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from stepwise.core.errors import Conflict, NotFound
from stepwise.interactions.models import Interaction, digest
from stepwise.llm.models import Usage
from stepwise.loop.calls import Ready, Resolved, Settled, StepScope
from stepwise.loop.gating import resolve
from stepwise.runs import delegation, events
from stepwise.runs.ports import stores
from stepwise.runs.state import CallRef, Wait
from stepwise.tools.base import ToolResult
from stepwise.tools.models import ClientTool


def settle(scope: StepScope, ref: CallRef, wait: Wait) -> Settled:
    """How the wait came out: a result to store, or the approved call, Ready to run."""
    interaction = stores().interactions.get(scope.tenant_id, wait.interaction_id)
    if interaction.status == "pending" and not stores().interactions.close(
        scope.tenant_id, wait.interaction_id, "expired"
    ):
        interaction = stores().interactions.get(scope.tenant_id, wait.interaction_id)  # answered meanwhile
    if interaction.kind == "delegation":
        return _delegated(scope, ref, interaction)
    if interaction.status != "answered":
        waited = "an approval" if interaction.kind == "approval" else "an answer"
        return Resolved(
            ref, ToolResult.failure("timeout", f"no one gave {waited} in time; the call did not run")
        )
    return _answered(scope, ref, interaction)


def spent_of(scope: StepScope, wait: Wait) -> Usage:
    """What a delegation wait's child spent, for a wait whose result the conversation already holds (an
    earlier attempt of this step stored it, then died before its context write counted the spend)."""
    if wait.kind != "delegation":
        return Usage()
    interaction = stores().interactions.get(scope.tenant_id, wait.interaction_id)
    if interaction.status != "answered":
        return Usage()
    return delegation.outcome_usage(interaction.answer or {})


def _delegated(scope: StepScope, ref: CallRef, interaction: Interaction) -> Resolved:
    """The child's outcome as the call's result: its answer whole, or its error code. A child the
    parent stopped waiting for is cancelled (its subtree with it)."""
    child_id = delegation.child_run_id(interaction)
    if interaction.status != "answered":
        from stepwise.runs.cancel import cancel

        with contextlib.suppress(NotFound, Conflict):  # never started, or ended as we gave up
            cancel(scope.tenant_id, child_id, reason="its parent stopped waiting for it")
        outcome: dict[str, Any] = {"status": "timed_out", "error": {"code": "timeout"}}
        result = ToolResult.failure("timeout", "the delegated run did not answer in time; it was cancelled")
    else:
        outcome = interaction.answer or {}
        if outcome.get("status") == "succeeded":
            result = ToolResult(output=outcome.get("output"))
        else:
            error = delegation.child_error(outcome)
            result = ToolResult.failure(error.code, error.message)
    data = {"tool_call_id": ref.id, "child_run_id": child_id, "status": outcome.get("status")}
    events.emit(scope.tenant_id, scope.run.run_id, "delegation_completed", data)
    return Resolved(ref, result, spent=delegation.outcome_usage(outcome), limit=None)


def _answered(scope: StepScope, ref: CallRef, interaction: Interaction) -> Settled:
    answer = interaction.answer or {}
    if interaction.kind == "client_tool":
        if answer.get("outcome") == "error":
            return Resolved(ref, ToolResult.failure("client_error", json.dumps(answer.get("output"))))
        return Resolved(ref, ToolResult(output=answer.get("output")))
    if not answer.get("approved"):
        reason = answer.get("reason") or "no reason given"
        return Resolved(ref, ToolResult.failure("denied", f"a human denied this call: {reason}"))
    tool = resolve(scope.agent, interaction.tool_name)
    bound = digest(scope.tenant_id, interaction.tool_name, interaction.arguments)
    if tool is None or isinstance(tool, ClientTool) or bound != interaction.digest:
        # the approval is bound to tool, arguments and tenant: anything else is not what was approved
        return Resolved(ref, ToolResult.failure("approval_mismatch", "the approved call no longer matches"))
    return Ready(ref=ref, tool=tool, arguments=interaction.arguments)

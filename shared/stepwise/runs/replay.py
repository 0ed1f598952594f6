"""Safe replay: a failed run may run again only when that cannot repeat a side effect.

The rules, in order: a run still active cannot be replayed; a succeeded run needs no replay; a run
that executed no tool (tools_executed == []) replays; one that executed tools, or whose tool record is
unknown (null), does not, unless forced. The replay is a new run in a fresh session, citing the
original in `replay_of` and keeping its trigger, so the effects ledger recognises its intents, with
copies of its attachments; once they are deleted (or past retention) it is 410 `input_gone`.
"""

from __future__ import annotations

from stepwise.core.errors import Conflict, Gone
from stepwise.runs.models import Run, RunCreate
from stepwise.runs.ports import stores
from stepwise.runs.start import start_run


def refusal(run: Run) -> Conflict | None:
    """Why `run` must not be replayed, told so a human knows what to do next; None when it may."""
    if not run.done:
        return Conflict(
            f"run {run.run_id} is still {run.status}; wait for it to finish or cancel it first",
            code="run_active",
        )
    if run.status == "succeeded":
        return Conflict(
            f"run {run.run_id} succeeded; start a new run instead (or pass force=true to run it again)",
            code="run_succeeded",
        )
    if run.tools_executed is None:
        return Conflict(
            f"it is unknown whether run {run.run_id} executed tools; check their effects, then pass "
            "force=true to replay anyway",
            code="tools_unknown",
        )
    if run.tools_executed:
        names = ", ".join(sorted(set(run.tools_executed)))
        return Conflict(
            f"run {run.run_id} already executed {names}; replaying could repeat their effects. Check them, "
            "then pass force=true to replay anyway",
            code="tools_executed",
            details={"tools_executed": run.tools_executed},
        )
    return None


def replay(tenant_id: str, run_id: str, *, force: bool = False) -> Run:
    original = stores().runs.get(tenant_id, run_id)
    reason = refusal(original)
    if reason is not None and (reason.code == "run_active" or not force):
        raise reason
    if not original.input:
        raise Gone(f"the input of run {run_id} is no longer stored; it cannot be replayed", code="input_gone")
    if original.attachments_erased_at is not None:
        raise Gone(
            f"the attachments of run {run_id} were deleted; it cannot be replayed without them",
            code="input_gone",
        )
    body = RunCreate(
        message=original.input,
        max_steps=original.max_steps,
        max_tokens_budget=original.max_tokens_budget,
        metadata=original.metadata,
        script=original.script,
        webhook=original.webhook,
        user_id=original.user_id,  # the same user's memories, in a fresh session of theirs
    )
    return start_run(
        tenant_id,
        original.agent_id,
        body,
        trigger_id=original.trigger_id,
        replay_of=original.run_id,
        replayed=original,  # its files are copied to the replay, under the same ids
    )

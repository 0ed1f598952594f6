"""Running an event's hooks in order and folding their decisions into one.

Semantics:

- Which hooks: enabled ones for the event whose matcher is None or equals the tool's name, in the
  order (position, created_at, hook_id), so equal positions still run in a stable order.
- Deny: the first hook that denies stops evaluation; the decision names it (`hook_id`) with its message.
- Chaining: on PreToolUse a hook's `modified_input` becomes the arguments every later hook sees, and on
  output events (PostToolUse, PreResponse) its `modified_output` becomes the output every later hook
  sees. Modifications on other events are ignored, as the event table says they cannot modify. A
  PreResponse output is the answer text, so a structured replacement is turned into JSON text.
- Approval: an approval hook (or an http hook replying "ask") on PreToolUse does not stop evaluation.
  The remaining hooks run first, so a later deny blocks without bothering a human and later
  modifications are applied; then the decision is "ask" with the first such hook's id and approval
  config, and the final arguments, which are what the human is shown and what runs once approved.
  "ask" on any other event, where nothing can wait for a human, is treated as a deny.
- Otherwise the decision is allow, with `modified_input` / `modified_output` when a hook replaced them
  and the `warnings` of http hooks that failed open.

The engine reports a deny for whatever event it happens on; what blocking means is the caller's: the
run fails (OnRunStart), the call is refused with the message (PreToolUse, OnDelegation), the result is
withheld and replaced with the message (PostToolUse), the answer is replaced (PreResponse), and nothing
on OnRunComplete, which is fire and forget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stepwise.hooks.http import HttpCall, call_http_hook
from stepwise.hooks.models import (
    APPROVAL_EVENTS,
    HOOK_EVENTS,
    INPUT_EVENTS,
    OUTPUT_EVENTS,
    ApprovalConfig,
    Hook,
    HookDecision,
    RuleConfig,
)
from stepwise.hooks.rules import as_text, evaluate_rules


def select(hooks: Sequence[Hook], *, event: str, tool_name: str | None) -> list[Hook]:
    """The hooks that fire for `event` on `tool_name`, in the order they run."""
    chosen = [
        hook
        for hook in hooks
        if hook.enabled and hook.event == event and (hook.matcher is None or hook.matcher == tool_name)
    ]
    return sorted(chosen, key=lambda hook: (hook.position, hook.created_at, hook.hook_id))


def evaluate(
    hooks: Sequence[Hook],
    *,
    event: str,
    tool_name: str | None,
    arguments: dict[str, Any] | None = None,
    output: Any = None,
    http_call: HttpCall = call_http_hook,
) -> HookDecision:
    """Run the hooks that fire for `event` and return the one decision they add up to.

    `arguments` are the tool's arguments (for OnRunStart, `{"message": ...}`), `output` the tool result
    or the final answer on output events. Pure apart from `http_call`; see the module docstring.
    """
    if event not in HOOK_EVENTS:
        raise ValueError(f"event must be one of {', '.join(HOOK_EVENTS)} (got {event!r})")
    current_input = dict(arguments or {})
    current_output = output if event in OUTPUT_EVENTS else None
    input_changed = output_changed = False
    pending: tuple[str, ApprovalConfig] | None = None  # the first hook that asks for a human
    warnings: list[str] = []

    for hook in select(hooks, event=event, tool_name=tool_name):
        config = hook.config
        if isinstance(config, ApprovalConfig):
            decision = HookDecision(action="ask", approval=config)
        elif isinstance(config, RuleConfig):
            decision = evaluate_rules(config.rules, arguments=current_input, output=current_output)
        else:
            decision = http_call(
                hook, event=event, tool_name=tool_name, data=current_input, output=current_output
            )
        warnings.extend(decision.warnings)

        if decision.action == "ask" and event not in APPROVAL_EVENTS:
            return _deny(hook, f"a hook asked for approval, which {event} cannot wait for", warnings)
        if decision.action == "deny":
            return _deny(hook, decision.message or f"blocked by a {event} hook", warnings)
        if decision.action == "ask" and pending is None:
            pending = (hook.hook_id, decision.approval or ApprovalConfig())
        if event in INPUT_EVENTS and decision.modified_input is not None:
            current_input, input_changed = decision.modified_input, True
        if event in OUTPUT_EVENTS and decision.modified_output is not None:
            replaced = decision.modified_output
            current_output = as_text(replaced) if event == "PreResponse" else replaced
            output_changed = True

    modified_input = current_input if input_changed else None
    modified_output = current_output if output_changed else None
    if pending is not None:
        hook_id, approval = pending
        return HookDecision(
            action="ask", hook_id=hook_id, approval=approval, modified_input=modified_input, warnings=warnings
        )
    return HookDecision(
        action="allow", modified_input=modified_input, modified_output=modified_output, warnings=warnings
    )


def _deny(hook: Hook, message: str, warnings: list[str]) -> HookDecision:
    return HookDecision(action="deny", message=message, hook_id=hook.hook_id, warnings=warnings)

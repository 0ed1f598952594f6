"""HTTP hooks: the event goes to the tenant's webhook, its JSON reply decides.

The request is `POST config.url` with `{event, tool_name, data, output?, truncated?}` (`tool_name` is ""
for events without a tool; `output` is sent for output events and whenever there is one). It is bounded
by a stated rule, so a model padding its arguments cannot push the request past what the webhook
accepts: every string in `data` and `output` over HOOK_STRING_LIMIT characters is cut there with
a visible marker, `truncated: true` says so, and a payload still over HOOK_PAYLOAD_LIMIT bytes is not
sent (a failure, see below). The reply is
`{action?: allow|deny|ask, message?, modified_input?, modified_output?}` with a 2xx status; a missing
action is allow.

Anything else (a timeout, a refused connection, a destination the SSRF guard blocks, a redirect, a
non-2xx status, a body that is not such a JSON object, an event too large to send) is a failure: a
`fail_closed` hook (the default on PreToolUse and OnDelegation) denies with "hook unavailable: …", any
other fails open (allow, with the failure in `message` and `warnings` for the log). `call_http_hook`
never raises for any of these.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, Protocol

import httpx
from pydantic import BaseModel, ValidationError

from stepwise.core import safejson
from stepwise.hooks.models import OUTPUT_EVENTS, ApprovalConfig, Hook, HookDecision, HttpConfig
from stepwise.net.outbound import OutboundRefused, ResponseTooLarge
from stepwise.net.ssrf import AllowHosts, guarded_client
from stepwise.tools.builtin._provider import truncation_marker
from stepwise.tools.http_tool import USER_AGENT

HOOK_REPLY_LIMIT = 1_000_000  # bytes of a hook's reply read before it counts as a failure
HOOK_STRING_LIMIT = 4_096  # characters of any one string of the event sent to a hook
HOOK_PAYLOAD_LIMIT = 64 * 1024  # bytes of the whole request body, after strings are cut


class HttpCall(Protocol):
    """The shape of `call_http_hook`, which the engine takes as a parameter so tests can fake it."""

    def __call__(
        self,
        hook: Hook,
        *,
        event: str,
        tool_name: str | None,
        data: Mapping[str, Any] | None,
        output: Any = None,
    ) -> HookDecision: ...


class HookReply(BaseModel):
    """A webhook's answer; fields beyond these are ignored so receivers can say more."""

    action: Literal["allow", "deny", "ask"] | None = None
    message: str | None = None
    modified_input: dict[str, Any] | None = None
    modified_output: Any = None


def call_http_hook(
    hook: Hook,
    *,
    event: str,
    tool_name: str | None,
    data: Mapping[str, Any] | None,
    output: Any = None,
    allow_hosts: AllowHosts = None,
) -> HookDecision:
    """POST the event to the hook's URL and turn the reply, or the failure, into a decision.

    `allow_hosts` None reads STEPWISE_ALLOW_HOSTS. Raises TypeError only when `hook` is not an http hook.
    """
    config = hook.config
    if not isinstance(config, HttpConfig):
        raise TypeError(f"hook {hook.hook_id} is a {hook.type} hook, not an http hook")
    try:
        sent, truncated = cut_strings(dict(data or {}))
        payload: dict[str, Any] = {"event": event, "tool_name": tool_name or "", "data": sent}
        if output is not None or event in OUTPUT_EVENTS:
            payload["output"], cut_output = cut_strings(output)
            truncated = truncated or cut_output
        if truncated:
            payload["truncated"] = True
        body = json.dumps(payload, ensure_ascii=False, allow_nan=False, default=str).encode()
    except ValueError as exc:
        return _failed(hook, config, f"the event is not valid JSON: {exc}")
    except RecursionError:
        return _failed(hook, config, "the event nests too deeply to send")
    if len(body) > HOOK_PAYLOAD_LIMIT:
        return _failed(
            hook,
            config,
            f"the event is {len(body):,} bytes after cutting strings at {HOOK_STRING_LIMIT:,} characters, "
            f"over the {HOOK_PAYLOAD_LIMIT:,} bytes a hook is sent",
        )

    headers = httpx.Headers({"User-Agent": USER_AGENT})
    headers.update(config.headers)
    headers["Content-Type"] = "application/json"
    timeout = config.timeout_seconds
    try:
        # No redirects: a webhook that moved is misconfigured, and following one would carry the
        # configured headers (often a secret) to wherever it points.
        with (
            guarded_client(
                timeout=timeout,
                max_response_bytes=HOOK_REPLY_LIMIT,
                allow_hosts=allow_hosts,
                follow_redirects=False,
            ) as client,
            client.stream("POST", config.url, headers=headers, content=body) as response,
        ):
            if not response.is_success:
                return _failed(hook, config, f"HTTP {response.status_code}")
            raw = response.read()
    except ResponseTooLarge:
        return _failed(hook, config, f"the reply is over {HOOK_REPLY_LIMIT} bytes")
    except OutboundRefused as exc:  # a blocked destination, a reply in stacked encodings
        return _failed(hook, config, exc.message)
    except httpx.TimeoutException:
        return _failed(hook, config, f"no reply within {timeout:g} seconds")
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return _failed(hook, config, f"could not reach {config.url}: {type(exc).__name__}: {exc}")
    return _decide(hook, config, raw)


def _decide(hook: Hook, config: HttpConfig, raw: bytes) -> HookDecision:
    try:
        reply = HookReply.model_validate_json(raw)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        return _failed(hook, config, f"invalid reply: {where + ': ' if where else ''}{problem['msg']}")
    try:
        # What a hook replaces becomes a tool's arguments or a run's output: capped like the model's.
        for replaced in (reply.modified_input, reply.modified_output):
            safejson.check_depth(replaced)
    except safejson.TooDeep as exc:
        return _failed(hook, config, f"invalid reply: {exc}")
    action = reply.action or "allow"
    return HookDecision(
        action=action,
        message=reply.message,
        modified_input=reply.modified_input,
        modified_output=reply.modified_output,
        hook_id=hook.hook_id,
        # The webhook can ask for a human but cannot configure how: the defaults apply.
        approval=ApprovalConfig() if action == "ask" else None,
    )


def cut_strings(value: Any) -> tuple[Any, bool]:
    """`value` with every string over HOOK_STRING_LIMIT characters cut there with a marker, and whether
    any was; keys are left alone (the payload limit bounds them)."""
    if isinstance(value, str):
        if len(value) <= HOOK_STRING_LIMIT:
            return value, False
        return value[:HOOK_STRING_LIMIT] + truncation_marker(len(value) - HOOK_STRING_LIMIT, len(value)), True
    if isinstance(value, Mapping):
        pairs = [(key, cut_strings(item)) for key, item in value.items()]
        return {key: item for key, (item, _) in pairs}, any(cut for _, (_, cut) in pairs)
    if isinstance(value, list | tuple):
        items = [cut_strings(item) for item in value]
        return [item for item, _ in items], any(cut for _, cut in items)
    return value, False


def _failed(hook: Hook, config: HttpConfig, reason: str) -> HookDecision:
    # None is never stored (HookCreate resolves it); were it to reach here, the safe direction is deny.
    if config.fail_closed is not False:
        return HookDecision(action="deny", message=f"hook unavailable: {reason}", hook_id=hook.hook_id)
    note = f"http hook {hook.hook_id} failed open: {reason}"
    return HookDecision(action="allow", message=note, hook_id=hook.hook_id, warnings=[note])


# What a hook's failed call decides (closed or open, as the hook says), for callers that fail it before
# the call (stepwise.runs.hooks, when its stored header secret does not decrypt).
failed = _failed

"""`stepwise triggers create|list|get|enable|disable|delete|rotate-secret|deliveries`: agents started by
signed inbound webhooks and by email (ses, gmail, outlook)."""

from __future__ import annotations

import argparse
from typing import Any

from stepwise_cli.client import data
from stepwise_cli.context import Context
from stepwise_cli.render import clip, table, when


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    triggers = commands.add_parser("triggers", help="start an agent when a webhook arrives")
    actions = triggers.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", parents=[common], help="a trigger for an agent")
    create.add_argument("agent_id")
    create.add_argument(
        "--type",
        choices=["webhook", "ses", "gmail", "outlook"],
        default="webhook",
        help="webhook (default); ses: mail to --address; gmail/outlook: a mailbox a person authorizes",
    )
    create.add_argument("--address", help="ses: the address at the operator's inbound domain")
    create.add_argument(
        "--allow-automated", action="store_true", help="email: also start on auto-replies, bulk and list mail"
    )
    create.add_argument("--message", required=True, help='a template, e.g. "{{action}}: {{$event}}"')
    create.add_argument(
        "--verification",
        choices=["standard-webhooks", "github", "stripe", "hmac-sha256"],
        help="how requests are signed (default standard-webhooks)",
    )
    create.add_argument("--signature-header", help="hmac-sha256: the header holding the signature")
    create.add_argument("--secret", help="the sender's own secret (e.g. Stripe's); else one is made")
    create.add_argument("--session-key", help="a template: one session per rendered key")
    create.add_argument("--user-id", help="a template for the run's user_id, e.g. {{sender.login}}")
    create.add_argument("--dedupe-path", help="a JSON path in the body that identifies the event")
    create.add_argument("--name", help="a name to recognise it by")
    create.add_argument("--disabled", action="store_true", help="create it switched off")
    create.set_defaults(handler=create_trigger)

    listing = actions.add_parser("list", parents=[common], help="the tenant's triggers")
    listing.set_defaults(handler=list_triggers)

    get = actions.add_parser("get", parents=[common], help="one trigger")
    get.add_argument("trigger_id")
    get.set_defaults(handler=get_trigger)

    for name, enabled in (("enable", True), ("disable", False)):
        switch = actions.add_parser(name, parents=[common], help=f"{name} a trigger")
        switch.add_argument("trigger_id")
        switch.set_defaults(handler=set_enabled, enabled=enabled)

    delete = actions.add_parser("delete", parents=[common], help="remove a trigger")
    delete.add_argument("trigger_id")
    delete.set_defaults(handler=delete_trigger)

    rotate = actions.add_parser("rotate-secret", parents=[common], help="a new signing secret")
    rotate.add_argument("trigger_id")
    rotate.add_argument("--secret", help="the sender's new secret; else one is made")
    rotate.add_argument(
        "--overlap", type=int, default=86_400, help="seconds the old secret still verifies (default 86400)"
    )
    rotate.set_defaults(handler=rotate_secret)

    deliveries = actions.add_parser("deliveries", parents=[common], help="what reached a trigger")
    deliveries.add_argument("trigger_id")
    deliveries.add_argument("--limit", type=int, default=20)
    deliveries.set_defaults(handler=list_deliveries)


def create_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"type": args.type, "target": {"agent_id": args.agent_id}, "message": args.message}
    optional = {
        "address": args.address,
        "allow_automated": args.allow_automated,
        "verification": args.verification,
        "signature_header": args.signature_header,
        "secret": args.secret,
        "user_id": args.user_id,
        "dedupe_path": args.dedupe_path,
        "name": args.name,
    }
    body.update({k: v for k, v in optional.items() if v})
    if args.session_key:
        body["session"] = {"by_key": args.session_key}
    if args.disabled:
        body["enabled"] = False
    return body


def create_trigger(ctx: Context) -> int:
    trigger = data(ctx.client.triggers.create(create_body(ctx.args)))
    kind = trigger.get("type")
    if kind == "webhook":
        lines = [
            f"created trigger {trigger.get('trigger_id')} ({trigger.get('verification')})",
            f"url:    {trigger.get('url')}",
            f"secret: {trigger.get('secret')}  (shown only now)",
        ]
    elif kind == "ses":
        lines = [f"created trigger {trigger.get('trigger_id')}: mail to {trigger.get('address')} starts it"]
    else:
        lines = [
            f"created trigger {trigger.get('trigger_id')} ({kind}); open this to authorize the mailbox, "
            "in the browser you sign in with (it opens once, within 10 minutes):",
            str(trigger.get("authorization_url")),
        ]
    ctx.show(trigger, lines)
    return 0


def _row(t: dict[str, Any]) -> list[Any]:
    refused = t.get("refused") or {}
    return [
        t.get("trigger_id"),
        (t.get("target") or {}).get("agent_id"),
        t.get("verification") or t.get("address") or t.get("type"),
        "on" if t.get("enabled", True) else "off",
        sum(int(v) for v in refused.values()),
        clip(str(t.get("message")), 40),
    ]


HEADERS = ["TRIGGER", "AGENT", "VERIFICATION/ADDRESS", "ENABLED", "REFUSED", "MESSAGE"]


def list_triggers(ctx: Context) -> int:
    listed = data(ctx.client.triggers.list())
    triggers = listed.get("triggers", [])
    ctx.show(listed, table(HEADERS, [_row(t) for t in triggers]) if triggers else ["no triggers"])
    return 0


def get_trigger(ctx: Context) -> int:
    trigger = data(ctx.client.triggers.get(ctx.args.trigger_id))
    ctx.show(trigger, [*table(HEADERS, [_row(trigger)]), f"url: {trigger.get('url')}"])
    return 0


def set_enabled(ctx: Context) -> int:
    trigger = data(ctx.client.triggers.update(ctx.args.trigger_id, {"enabled": ctx.args.enabled}))
    state = "enabled" if trigger.get("enabled") else "disabled"
    ctx.show(trigger, [f"trigger {trigger.get('trigger_id')} {state}"])
    return 0


def delete_trigger(ctx: Context) -> int:
    ctx.client.triggers.delete(ctx.args.trigger_id)
    ctx.show({"trigger_id": ctx.args.trigger_id, "deleted": True}, [f"deleted trigger {ctx.args.trigger_id}"])
    return 0


def rotate_secret(ctx: Context) -> int:
    body: dict[str, Any] = {"previous_valid_seconds": ctx.args.overlap}
    if ctx.args.secret:
        body["secret"] = ctx.args.secret
    rotated = data(ctx.client.triggers.rotate_secret(ctx.args.trigger_id, body))
    until = rotated.get("previous_valid_until")
    ctx.show(
        rotated,
        [
            f"secret: {rotated.get('secret')}  (shown only now)",
            f"the previous one verifies until {when(until)} UTC" if until else "the previous one is revoked",
        ],
    )
    return 0


def list_deliveries(ctx: Context) -> int:
    listed = data(ctx.client.triggers.deliveries(ctx.args.trigger_id, limit=ctx.args.limit))
    found = listed.get("deliveries", [])
    rows = [
        [
            d.get("delivery_id"),
            when(d["received_at"]),
            d.get("status"),
            d.get("attempts"),
            d.get("run_id"),
            clip(str(d.get("reason") or d.get("duplicate_of") or ""), 50),
        ]
        for d in found
    ]
    lines = table(["DELIVERY", "RECEIVED", "STATUS", "ATTEMPTS", "RUN", "WHY"], rows)
    ctx.show(listed, lines if found else ["no deliveries"])
    return 0

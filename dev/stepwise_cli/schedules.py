"""`stepwise schedules create|list|delete`: an agent started on EventBridge Scheduler's clock."""

from __future__ import annotations

import argparse
from typing import Any

from stepwise_cli.client import data
from stepwise_cli.context import Context
from stepwise_cli.render import clip, table, when


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    schedules = commands.add_parser("schedules", help="start an agent on a schedule")
    actions = schedules.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", parents=[common], help="add a schedule to an agent")
    create.add_argument("agent_id")
    create.add_argument(
        "--expression",
        required=True,
        help='"rate(1 hour)", "cron(0 9 ? * MON-FRI *)" or "at(2030-01-01T09:00:00)"',
    )
    create.add_argument("--message", required=True, help="the message each run starts with")
    create.add_argument("--timezone", help="an IANA zone for cron and at, e.g. Europe/Paris (default UTC)")
    create.add_argument("--disabled", action="store_true", help="create it switched off")
    create.set_defaults(handler=create_schedule)

    listing = actions.add_parser("list", parents=[common], help="an agent's schedules")
    listing.add_argument("agent_id")
    listing.set_defaults(handler=list_schedules)

    delete = actions.add_parser("delete", parents=[common], help="remove a schedule")
    delete.add_argument("agent_id")
    delete.add_argument("schedule_id")
    delete.set_defaults(handler=delete_schedule)


def create_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"expression": args.expression, "message": args.message}
    if args.timezone:
        body["timezone"] = args.timezone
    if args.disabled:
        body["enabled"] = False
    return body


def create_schedule(ctx: Context) -> int:
    schedule = data(ctx.client.schedules.create(ctx.args.agent_id, create_body(ctx.args)))
    ctx.show(
        schedule,
        [
            f"created schedule {schedule.get('schedule_id')}: {schedule.get('expression')} "
            f"({schedule.get('timezone')}), next run {_next(schedule)}"
        ],
    )
    return 0


def _next(schedule: dict[str, Any]) -> str:
    if not schedule.get("enabled", True):
        return "never (disabled)"
    return f"{when(schedule['next_run'])} UTC" if schedule.get("next_run") else "never"


def list_schedules(ctx: Context) -> int:
    listed = data(ctx.client.schedules.list(ctx.args.agent_id))
    schedules = listed.get("schedules", [])
    rows = [
        [
            s.get("schedule_id"),
            s.get("expression"),
            s.get("timezone"),
            _next(s),
            clip(str(s.get("message")), 50),
        ]
        for s in schedules
    ]
    lines = table(["SCHEDULE", "EXPRESSION", "TIMEZONE", "NEXT RUN", "MESSAGE"], rows)
    ctx.show(listed, lines if schedules else ["no schedules"])
    return 0


def delete_schedule(ctx: Context) -> int:
    args = ctx.args
    ctx.client.schedules.delete(args.agent_id, args.schedule_id)
    ctx.show(
        {"agent_id": args.agent_id, "schedule_id": args.schedule_id, "deleted": True},
        [f"deleted schedule {args.schedule_id}"],
    )
    return 0

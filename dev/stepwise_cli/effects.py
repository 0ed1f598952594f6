"""`stepwise effects list|resolve`: the effects a run may or may not have performed, and a person's word
on them (`done`: a replay answers from the ledger; `undone`: a replay performs it again)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from stepwise_cli.client import data
from stepwise_cli.context import Context
from stepwise_cli.render import clip, table, when

STATUSES = ("unknown", "done", "undone", "claimed", "released")


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    effects = commands.add_parser("effects", help="review effects whose outcome is unknown")
    actions = effects.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="the tenant's effect entries")
    listing.add_argument("--status", choices=STATUSES, default="unknown", help="default: unknown")
    listing.add_argument("--run", dest="run_id", help="only this run's")
    listing.add_argument("--next-token", help="the page after the one that printed it")
    listing.set_defaults(handler=list_effects)

    resolve = actions.add_parser("resolve", parents=[common], help="record whether an effect happened")
    resolve.add_argument("key", help="effect:<sha256>, as listed")
    resolve.add_argument("outcome", choices=("done", "undone"), help="done: it happened; undone: it did not")
    resolve.add_argument("--note", help="why, for whoever reads it next")
    resolve.set_defaults(handler=resolve_effect)


def list_effects(ctx: Context) -> int:
    args = ctx.args
    page = data(ctx.client.effects.list(status=args.status, run_id=args.run_id, next_token=args.next_token))
    effects: list[dict[str, Any]] = page.get("effects", [])
    rows = [
        [
            e.get("key"),
            e.get("status"),
            e.get("tool"),
            clip(json.dumps(e.get("arguments"), ensure_ascii=False), 40),
            e.get("run_id"),
            when(e["claimed_at"]) if e.get("claimed_at") else "",
        ]
        for e in effects
    ]
    lines = table(["KEY", "STATUS", "TOOL", "ARGUMENTS", "RUN", "CLAIMED"], rows) if effects else []
    if not effects:
        lines = [f"no {args.status} effects on this page"]
    if page.get("next_token"):
        lines.append(f"more: stepwise effects list --status {args.status} --next-token {page['next_token']}")
    ctx.show(page, lines)
    return 0


def resolve_effect(ctx: Context) -> int:
    args = ctx.args
    entry = data(ctx.client.effects.resolve(args.key, args.outcome, note=args.note))
    resolution = entry.get("resolution") or {}
    then = "a replay answers from the ledger" if args.outcome == "done" else "a replay performs it again"
    ctx.show(entry, [f"{entry.get('key')} is {entry.get('status')} (by {resolution.get('by')}): {then}"])
    return 0

"""`stepwise migrate seal-headers --agents-table NAME --settings-key KEY`: seal the header secrets that
agents stored before they were sealed at rest (stepwise.header_secrets). It scans the AgentsTable with the
environment's AWS credentials (no API call; no function is granted a Scan) and writes every agent that
still holds a header value in the clear again, through the same version-checked write as any edit, which
seals it. Idempotent: a second run finds nothing to seal."""

from __future__ import annotations

import argparse
import json
import os

from stepwise_cli.context import Context


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    migrate = commands.add_parser("migrate", help="data migrations (with AWS credentials)")
    actions = migrate.add_subparsers(dest="action", required=True, metavar="ACTION")
    seal = actions.add_parser("seal-headers", help="seal header secrets stored in the clear")
    seal.add_argument("--agents-table", required=True, help="the stack's AgentsTable name (a stack output)")
    seal.add_argument("--settings-key", required=True, help="the stack's settings KMS key id or ARN")
    seal.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    seal.set_defaults(handler=seal_headers)


def seal_headers(ctx: Context) -> int:
    from stepwise.agents import store as agents
    from stepwise.core import config, tables
    from stepwise.header_secrets import has_plain

    os.environ.setdefault("AGENTS_TABLE", ctx.args.agents_table)
    os.environ.setdefault("SETTINGS_KEY_ID", ctx.args.settings_key)
    for field in config.Tables.model_fields.values():  # the other tables: not touched by this command
        os.environ.setdefault(str(field.alias), "unused-by-this-command")
    config.reset()
    tables.rebind()
    sealed = 0
    for item in tables.AgentItem.scan():
        if has_plain(item.doc or {}):
            agents.modify(item.tenant_id, item.agent_id, lambda agent: {})  # the write seals them
            sealed += 1
    if ctx.json:
        ctx.write(json.dumps({"sealed_agents": sealed}) + "\n")
    else:
        ctx.write(f"sealed the header secrets of {sealed} agent(s)\n")
    return 0

"""`stepwise keys create --tenant T --table NAME`: issue an API key for a deployed stack. It writes to
the ApiKeysTable directly with the environment's AWS credentials (no API call), stores only the key's
hash and prints the key once."""

from __future__ import annotations

import argparse
import json
import os

from stepwise_cli.context import Context, UsageError


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    keys = commands.add_parser("keys", help="API keys (with AWS credentials, not through the API)")
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="issue a new API key for a tenant")
    create.add_argument("--tenant", default=None, help="tenant id (default: a new one)")
    create.add_argument("--table", required=True, help="the stack's ApiKeysTable name (a stack output)")
    create.add_argument("--name", help="who holds it, as records of its actions show (e.g. ops-oncall)")
    create.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    create.set_defaults(handler=create_key)


def create_key(ctx: Context) -> int:
    from stepwise.core import config, tables
    from stepwise.core.ids import InvalidTenant, new_id, valid_tenant
    from stepwise.store import keys

    tenant = ctx.args.tenant or new_id("ten")
    try:
        valid_tenant(tenant)  # before anything is written: the tenant starts every key of its items
    except InvalidTenant as exc:
        raise UsageError(str(exc)) from None
    os.environ.setdefault("API_KEYS_TABLE", ctx.args.table)
    for field in config.Tables.model_fields.values():  # the other tables: not touched by this command
        os.environ.setdefault(str(field.alias), "unused-by-this-command")
    config.reset()
    tables.rebind()
    key = keys.generate_key()
    keys.store_key(key, tenant, name=ctx.args.name)
    if ctx.json:
        ctx.write(json.dumps({"tenant_id": tenant, "key": key}) + "\n")
    else:
        ctx.write(key + "\n")
    ctx.note(f"tenant {tenant}: keep this key now, it is stored only as a hash")
    return 0

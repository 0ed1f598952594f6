"""`stepwise`: administration from a terminal. For now, issuing API keys for a deployed stack.

    stepwise keys create --tenant acme --table <ApiKeysTable name>

uses the AWS credentials of the environment, stores only the key's hash and prints the key once.
"""

from __future__ import annotations

import argparse
import os
import sys

from stepwise.ids import new_id


def _create_key(args: argparse.Namespace) -> int:
    from stepwise import config
    from stepwise.store import keys, tables

    os.environ.setdefault("API_KEYS_TABLE", args.table)
    for field in config.Tables.model_fields.values():  # the other tables: not touched by this command
        os.environ.setdefault(str(field.alias), "unused-by-this-command")
    config.reset()
    tables.rebind()
    key = keys.generate_key()
    keys.store_key(key, args.tenant)
    print(key)
    print(f"tenant {args.tenant}: keep this key now, it is stored only as a hash", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stepwise")
    commands = parser.add_subparsers(dest="command", required=True)
    keys_parser = commands.add_parser("keys", help="API keys").add_subparsers(dest="action", required=True)
    create = keys_parser.add_parser("create", help="issue a new API key for a tenant")
    create.add_argument("--tenant", default=None, help="tenant id (default: a new one)")
    create.add_argument("--table", required=True, help="the stack's ApiKeysTable name (a stack output)")
    create.set_defaults(run=_create_key)
    args = parser.parse_args(argv)
    if getattr(args, "tenant", "") is None:
        args.tenant = new_id("ten")
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())

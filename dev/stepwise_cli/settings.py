"""`stepwise settings put|list|delete`: per-tenant secrets for builtin tools. Values go in and never
come out: nothing here prints one, and the API returns none."""

from __future__ import annotations

import argparse
import getpass

from stepwise_cli.client import data
from stepwise_cli.context import Context, UsageError
from stepwise_cli.render import table, when


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    settings = commands.add_parser("settings", help="per-tenant secrets such as EXA_API_KEY")
    actions = settings.add_subparsers(dest="action", required=True, metavar="ACTION")

    put = actions.add_parser("put", parents=[common], help="set a value (read from stdin unless --value)")
    put.add_argument(
        "setting",
        metavar="KEY",
        help="upper case, digits and _, e.g. EXA_API_KEY; or providers.openai.api_key",
    )  # not `key`: that is the API key
    put.add_argument("--agent", help="the agent's own provider key (used before the tenant's)")
    put.add_argument(
        "--value", help="the value (it lands in shell history: prefer stdin, or the prompt on a terminal)"
    )
    put.set_defaults(handler=put_setting)

    actions.add_parser("list", parents=[common], help="the keys that are set").set_defaults(
        handler=list_settings
    )

    delete = actions.add_parser("delete", parents=[common], help="remove a setting")
    delete.add_argument("setting", metavar="KEY")
    delete.add_argument("--agent", help="the agent's own provider key")
    delete.set_defaults(handler=delete_setting)


def read_value(ctx: Context) -> str:
    """--value, else a prompt that does not echo on a terminal, else all of stdin (one trailing newline
    dropped, as `echo` and here-strings add it)."""
    if ctx.args.value is not None:
        value = str(ctx.args.value)
    elif ctx.stdin.isatty():
        value = getpass.getpass(f"value for {ctx.args.setting} (not shown): ")
    else:
        value = ctx.stdin.read().removesuffix("\n").removesuffix("\r")
    if not value:
        raise UsageError(f"no value for {ctx.args.setting}: pass --value or pipe it on stdin")
    return value


def put_setting(ctx: Context) -> int:
    info = data(ctx.client.settings.put(ctx.args.setting, read_value(ctx), agent_id=ctx.args.agent))
    ctx.show(info, [f"set {info.get('key')} (updated {when(info.get('updated_at'))} UTC)"])
    return 0


def list_settings(ctx: Context) -> int:
    listed = data(ctx.client.settings.list())
    found = listed.get("settings", [])
    rows = [[s.get("key"), s.get("agent_id") or "-", when(s.get("updated_at"))] for s in found]
    ctx.show(listed, table(["KEY", "AGENT", "UPDATED"], rows) if found else ["no settings"])
    return 0


def delete_setting(ctx: Context) -> int:
    ctx.client.settings.delete(ctx.args.setting, agent_id=ctx.args.agent)
    ctx.show({"key": ctx.args.setting, "deleted": True}, [f"deleted {ctx.args.setting}"])
    return 0

"""`stepwise run` and `stepwise runs list|get|follow|cancel|replay|what-if|compare`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from stepwise_cli.client import Hinted, data
from stepwise_cli.context import Context, UsageError, read_json
from stepwise_cli.follow import follow
from stepwise_cli.render import comparison_lines, run_block, runs_table
from stepwise_sdk import ConflictError


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    run = commands.add_parser(
        "run", parents=[common], help="start a run and follow its events live (exit 0 when it succeeds)"
    )
    run.add_argument("agent_id")
    run.add_argument("message")
    run.add_argument("--session", help="continue this session (default: a new one)")
    run.add_argument(
        "--script", metavar="FILE", help='turns for the scripted model: a JSON list, or {"script": [...]}'
    )
    run.add_argument("--max-steps", type=int, metavar="N")
    run.add_argument(
        "--follow",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="follow the run until it ends (default); --no-follow prints its id and returns",
    )
    run.set_defaults(handler=start_run)

    runs = commands.add_parser("runs", help="list, show, follow, cancel, replay and compare runs")
    actions = runs.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[common], help="runs, newest first")
    listing.add_argument("--agent", help="only this agent's runs")
    listing.add_argument("--session", help="only this session's runs")
    listing.add_argument("--status", help="only runs in this status, e.g. waiting or failed")
    listing.add_argument("--user", help="only this end user's runs")
    triggers = ["api", "schedule", "event", "delegation", "what_if"]
    listing.add_argument("--trigger", choices=triggers, help="only runs started this way")
    listing.add_argument("--after", metavar="TIME", help="only runs created at or after this ISO 8601 time")
    listing.add_argument("--before", metavar="TIME", help="only runs created before this ISO 8601 time")
    listing.add_argument("--limit", type=int, help="at most this many (the API's page size by default)")
    listing.add_argument("--next-token", help="the page after the one that printed this token")
    listing.set_defaults(handler=list_runs)

    get = actions.add_parser("get", parents=[common], help="show a run")
    get.add_argument("run_id")
    get.set_defaults(handler=get_run)

    again = actions.add_parser("follow", parents=[common], help="follow a run's events until it ends")
    again.add_argument("run_id")
    again.add_argument("--after", type=int, default=0, metavar="N", help="start after event N (default 0)")
    again.set_defaults(handler=follow_run)

    cancel = actions.add_parser(
        "cancel", parents=[common], help="cancel an active run, or every active run that matches (--agent...)"
    )
    cancel.add_argument("run_id", nargs="?", help="the run; without it, the filters choose (the kill switch)")
    cancel.add_argument("--agent", help="every active run of this agent")
    cancel.add_argument("--user", help="every active run of this user")
    cancel.add_argument("--status", choices=["queued", "running", "waiting"], help="only runs in this status")
    cancel.add_argument("--before", metavar="TIME", help="only runs created before this ISO 8601 time")
    cancel.add_argument("--all", action="store_true", help="every active run of the tenant (no filter)")
    cancel.set_defaults(handler=cancel_run)

    replay = actions.add_parser("replay", parents=[common], help="start a new run with a run's input")
    replay.add_argument("run_id")
    replay.add_argument("--force", action="store_true", help="replay even when it could repeat a side effect")
    replay.set_defaults(handler=replay_run)

    what_if = actions.add_parser(
        "what-if",
        parents=[common],
        help="replay a finished run under a change, its tool calls served from its record (no effects)",
    )
    what_if.add_argument("run_id")
    what_if.add_argument("--model", help="the model to try")
    what_if.add_argument("--prompt-file", metavar="FILE", help="a file holding the system prompt to try")
    what_if.add_argument("--agent", help="replay on another agent of the tenant")
    what_if.add_argument("--match", choices=["arguments", "name"], help="how a call matches a recorded one")
    what_if.add_argument("--live-reads", action="store_true", help="run unmatched read-only calls live")
    what_if.add_argument("--script", metavar="FILE", help="turns for the scripted model (local)")
    what_if.set_defaults(handler=what_if_run)

    compare = actions.add_parser("compare", parents=[common], help="two runs side by side")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.set_defaults(handler=compare_runs)


def script_from_file(path: str) -> list[Any]:
    loaded = read_json(path, "script")
    if isinstance(loaded, dict) and isinstance(loaded.get("script"), list):
        return list(loaded["script"])
    if isinstance(loaded, list):
        return loaded
    raise UsageError(f'script {path} must hold a list of turns or {{"script": [...]}}')


def run_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"message": args.message}
    optional = {"session_id": args.session, "max_steps": args.max_steps}
    body.update({k: v for k, v in optional.items() if v is not None})
    if args.script:
        body["script"] = script_from_file(args.script)
    return body


def start_run(ctx: Context) -> int:
    accepted = data(ctx.client.runs.create(ctx.args.agent_id, run_body(ctx.args)))
    run_id = accepted["run_id"]
    if ctx.args.follow:
        if ctx.json:
            ctx.lines([json.dumps(accepted, ensure_ascii=False)])  # then one line per event
        return follow(ctx, run_id)
    ctx.show(
        accepted,
        [
            f"run {run_id} {accepted.get('status')} (session {accepted.get('session_id')})",
            f"follow it: {ctx.cli} runs follow {run_id}",
        ],
    )
    return 0


def list_runs(ctx: Context) -> int:
    args = ctx.args
    listed = data(
        ctx.client.runs.list(
            agent_id=args.agent,
            session_id=args.session,
            status=args.status,
            limit=args.limit,
            next_token=args.next_token,
            user_id=args.user,
            trigger=args.trigger,
            created_after=args.after,
            created_before=args.before,
        )
    )
    runs = listed.get("runs", [])
    lines = runs_table(runs) if runs else ["no runs"]
    if listed.get("next_token"):
        filters = [
            ("--agent", args.agent),
            ("--session", args.session),
            ("--status", args.status),
            ("--user", args.user),
            ("--trigger", args.trigger),
            ("--after", args.after),
            ("--before", args.before),
            ("--limit", args.limit),
        ]
        again = "".join(f" {flag} {value}" for flag, value in filters if value)
        lines.append(f"more: {ctx.cli} runs list{again} --next-token {listed['next_token']}")
    ctx.show(listed, lines)
    return 0


def get_run(ctx: Context) -> int:
    run = data(ctx.client.runs.get(ctx.args.run_id))
    ctx.show(run, run_block(run))
    return 0


def follow_run(ctx: Context) -> int:
    return follow(ctx, ctx.args.run_id, after=ctx.args.after)


def cancel_run(ctx: Context) -> int:
    args = ctx.args
    filters = {
        "agent_id": args.agent,
        "user_id": args.user,
        "status": args.status,
        "created_before": args.before,
    }
    chosen = {k: v for k, v in filters.items() if v is not None}
    if args.run_id is not None:
        if chosen or args.all:
            raise UsageError("give a run id or filters (--agent, --user, --status, --before), not both")
        run = data(ctx.client.runs.cancel(args.run_id))
        ctx.show(run, [f"run {run.get('run_id')} is {run.get('status')}"])
        return 0
    if not chosen and not args.all:
        raise UsageError("name a run, or choose runs with --agent, --user, --status, --before (or --all)")
    result = data(ctx.client.runs.cancel_many(**chosen))
    more = "; the rest are being cancelled in the background" if result.get("continuing") else ""
    ctx.show(result, [f"cancelled {result.get('cancelled')} runs{more}"])
    return 0


def replay_run(ctx: Context) -> int:
    try:
        accepted = data(ctx.client.runs.replay(ctx.args.run_id, force=ctx.args.force))
    except ConflictError as exc:
        if ctx.args.force:
            raise
        raise Hinted(exc, f"to replay anyway: {ctx.cli} runs replay {ctx.args.run_id} --force") from exc
    run_id = accepted["run_id"]
    ctx.show(
        accepted,
        [
            f"run {run_id} {accepted.get('status')}: a replay of {accepted.get('replay_of')}",
            f"follow it: {ctx.cli} runs follow {run_id}",
        ],
    )
    return 0


def what_if_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"model": args.model, "agent_id": args.agent, "match": args.match}
    if args.prompt_file:
        try:
            with open(args.prompt_file, encoding="utf-8") as handle:
                body["system_prompt"] = handle.read()
        except OSError as exc:
            raise UsageError(f"cannot read the prompt file {args.prompt_file}: {exc.strerror}") from exc
    if args.live_reads:
        body["live_reads"] = True
    if args.script:
        body["script"] = script_from_file(args.script)
    return {k: v for k, v in body.items() if v is not None}


def what_if_run(ctx: Context) -> int:
    run = data(ctx.client.runs.what_if(ctx.args.run_id, what_if_body(ctx.args)))
    run_id = run["run_id"]
    ctx.show(
        run,
        [
            f"run {run_id} {run.get('status')}: a what-if of {run.get('what_if_of')}",
            f"follow it: {ctx.cli} runs follow {run_id}",
            f"then compare: {ctx.cli} runs compare {run.get('what_if_of')} {run_id}",
        ],
    )
    return 0


def compare_runs(ctx: Context) -> int:
    compared = data(ctx.client.runs.compare(ctx.args.run_a, ctx.args.run_b))
    ctx.show(compared, comparison_lines(compared))
    return 0

"""Answering paused runs: `stepwise approve|deny` (approvals), `stepwise respond` (client tools) and
`stepwise interactions` (what a session waits on)."""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any, Literal

from stepwise_cli.client import Hinted, data
from stepwise_cli.context import Context, UsageError
from stepwise_cli.render import call, table, when
from stepwise_sdk import ConflictError


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    for name, approved in (("approve", True), ("deny", False)):
        decide = commands.add_parser(
            name, parents=[common], help=f"{name} a run's pending tool call (POST /v1/runs/{{id}}/approve)"
        )
        decide.add_argument("run_id")
        decide.add_argument(
            "--tool-call", dest="tool_call_id", metavar="ID", help="which call, when several wait"
        )
        decide.add_argument("--reason", help="recorded with the decision; the model reads a denial's")
        decide.set_defaults(handler=decide_approval, approved=approved)

    respond = commands.add_parser("respond", parents=[common], help="answer a client tool call")
    respond.add_argument("interaction_id")
    respond.add_argument(
        "--output", required=True, metavar="JSON", help="the tool's result as JSON (- reads it from stdin)"
    )
    respond.add_argument("--error", action="store_true", help="the tool failed: --output describes why")
    respond.add_argument(
        "--tool-call-id",
        required=True,
        metavar="ID",
        help="the call answered (printed with the request, and by `stepwise interactions`)",
    )
    respond.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="send a retry with the key printed by the first attempt (default: a new key)",
    )
    respond.set_defaults(handler=respond_client_tool)

    interactions = commands.add_parser(
        "interactions", parents=[common], help="a session's approvals and client tool calls"
    )
    interactions.add_argument("session_id")
    interactions.add_argument("--pending", action="store_true", help="only those still waiting")
    interactions.set_defaults(handler=list_interactions)


def decide_approval(ctx: Context) -> int:
    args = ctx.args
    try:
        decided = data(
            ctx.client.approvals.decide(
                args.run_id, approved=args.approved, tool_call_id=args.tool_call_id, reason=args.reason
            )
        )
    except ConflictError as exc:
        if exc.code != "ambiguous_approval":
            raise
        verb = "approve" if args.approved else "deny"
        raise Hinted(exc, f"name one: {ctx.cli} {verb} {args.run_id} --tool-call ID") from exc
    verdict = "approved" if args.approved else "denied"
    ctx.show(
        decided,
        [
            f"{verdict} {call(decided.get('tool_name'), decided.get('arguments'))} "
            f"(tool call {decided.get('tool_call_id')}); run {args.run_id} continues",
            f"follow it: {ctx.cli} runs follow {args.run_id}",
        ],
    )
    return 0


def parse_output(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(
            f"--output is not JSON ({exc}); a plain string needs JSON quotes: --output '\"some text\"'"
        ) from None


def answer(args: argparse.Namespace, output: Any) -> dict[str, Any]:
    return {
        "tool_call_id": args.tool_call_id,
        "outcome": "error" if args.error else "completed",
        "output": output,
    }


def respond_client_tool(ctx: Context) -> int:
    args = ctx.args
    output = parse_output(ctx.stdin.read() if args.output == "-" else args.output)
    key = args.idempotency_key or f"cli-{uuid.uuid4()}"
    answered = data(
        ctx.client.interactions.respond(args.interaction_id, answer(args, output), idempotency_key=key)
    )
    ctx.show(
        answered,
        [
            f"answered {answered.get('tool_name')} (interaction {answered.get('interaction_id')}, "
            f"run {answered.get('run_id')}): {answered.get('status')}",
            f"idempotency key {key}: pass it as --idempotency-key to retry this answer safely",
        ],
    )
    return 0


def list_interactions(ctx: Context) -> int:
    status: Literal["pending"] | None = "pending" if ctx.args.pending else None
    listed = data(ctx.client.interactions.list(ctx.args.session_id, status=status))
    found = listed.get("interactions", [])
    rows = [
        [
            i.get("interaction_id"),
            i.get("kind"),
            i.get("status"),
            i.get("run_id"),
            i.get("tool_call_id"),
            when(i.get("created_at")),
            call(i.get("tool_name"), i.get("arguments")),
        ]
        for i in found
    ]
    headers = ["INTERACTION", "KIND", "STATUS", "RUN", "TOOL CALL", "CREATED", "CALL"]
    nothing = "nothing pending" if ctx.args.pending else "no interactions"
    ctx.show(listed, table(headers, rows) if found else [nothing])
    return 0

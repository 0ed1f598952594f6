"""`stepwise workflows create|publish|list|get|asl|run`: workflows of agents, compiled to Step Functions.

`workflows run W --input '{…}'` starts a workflow run and follows its events (node_started,
node_completed, node_failed, approvals) like `stepwise run` follows a run; exit 0 when it succeeds."""

from __future__ import annotations

import argparse
import json
from typing import Any

from stepwise_cli.client import data
from stepwise_cli.context import Context, UsageError, read_json
from stepwise_cli.follow import follow


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    workflows = commands.add_parser("workflows", help="create, publish, list and run workflows")
    actions = workflows.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", parents=[common], help="create a workflow from a JSON file")
    create.add_argument("file", help="{name, description?, input_schema?, root}")
    create.set_defaults(handler=create_workflow)

    publish = actions.add_parser("publish", parents=[common], help="publish a new version from a JSON file")
    publish.add_argument("workflow_id")
    publish.add_argument("file")
    publish.set_defaults(handler=publish_workflow)

    listing = actions.add_parser("list", parents=[common], help="the tenant's workflows")
    listing.set_defaults(handler=list_workflows)

    get = actions.add_parser("get", parents=[common], help="a workflow (its latest version)")
    get.add_argument("workflow_id")
    get.set_defaults(handler=get_workflow)

    asl = actions.add_parser("asl", parents=[common], help="the compiled state machine definition")
    asl.add_argument("workflow_id")
    asl.add_argument("--version", type=int)
    asl.set_defaults(handler=show_asl)

    run = actions.add_parser("run", parents=[common], help="run a workflow and follow it")
    run.add_argument("workflow_id")
    run.add_argument("--input", default="{}", help="the input as JSON (default {})")
    run.add_argument("--version", type=int, help="a published version (default: the latest)")
    run.add_argument("--follow", action=argparse.BooleanOptionalAction, default=True)
    run.set_defaults(handler=run_workflow)


def _summary(workflow: dict[str, Any]) -> str:
    return f"{workflow['workflow_id']}  v{workflow['version']}  {workflow['name']}"


def create_workflow(ctx: Context) -> int:
    created = data(ctx.client.workflows.create(read_json(ctx.args.file, "workflow file")))
    ctx.show(created, [f"created {_summary(created)}"])
    return 0


def publish_workflow(ctx: Context) -> int:
    body = read_json(ctx.args.file, "workflow file")
    published = data(ctx.client.workflows.publish(ctx.args.workflow_id, body))
    ctx.show(published, [f"published {_summary(published)}"])
    return 0


def list_workflows(ctx: Context) -> int:
    found = data(ctx.client.workflows.list())
    ctx.show(found, [_summary(w) for w in found["workflows"]] or ["no workflows"])
    return 0


def get_workflow(ctx: Context) -> int:
    found = data(ctx.client.workflows.get(ctx.args.workflow_id))
    ctx.show(found, [_summary(found), json.dumps(found["root"], indent=2)])
    return 0


def show_asl(ctx: Context) -> int:
    found = data(ctx.client.workflows.asl(ctx.args.workflow_id, version=ctx.args.version))
    ctx.write(json.dumps(found["definition"], indent=2) + "\n")
    return 0


def run_workflow(ctx: Context) -> int:
    try:
        payload = json.loads(ctx.args.input)
    except ValueError as exc:
        raise UsageError(f"--input is not valid JSON: {exc}") from None
    body: dict[str, Any] = {"input": payload}
    if ctx.args.version is not None:
        body["version"] = ctx.args.version
    accepted = data(ctx.client.workflows.run(ctx.args.workflow_id, body))
    run_id = accepted["run_id"]
    if ctx.args.follow:
        if ctx.json:
            ctx.lines([json.dumps(accepted, ensure_ascii=False)])
        return follow(ctx, run_id)
    ctx.show(
        accepted,
        [
            f"workflow run {run_id} (version {accepted['version']})",
            f"follow it: {ctx.cli} runs follow {run_id}",
        ],
    )
    return 0

"""`stepwise eval run|list`: run an eval suite and follow it live, for a person or for CI.

`eval run` starts an eval run (with the overrides given), draws a progress bar while its cases run,
then prints one row per case and the aggregate. Its exit code gates CI: 1 when a case that passed in
the suite's previous eval run fails now (or the eval run itself failed), else 0."""

from __future__ import annotations

import argparse
import time
from typing import Any

from stepwise_cli.client import data
from stepwise_cli.context import EXIT_OK, EXIT_RUN_FAILED, Context, UsageError
from stepwise_cli.render import clip, table

POLL_SECONDS = 0.5
BAR = 30  # characters of the progress bar


def register(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    evals = commands.add_parser("eval", help="run eval suites")
    actions = evals.add_subparsers(dest="action", required=True, metavar="ACTION")

    run = actions.add_parser(
        "run", parents=[common], help="run a suite and follow it; exit 1 on a regression"
    )
    run.add_argument("suite", help="the suite's eval_id or its name")
    run.add_argument("--model", help="replay recorded cases with this model")
    run.add_argument("--prompt-file", help="replay recorded cases with this file as the system prompt")
    run.add_argument("--max-steps", type=int, help="at most this many steps per case")
    run.add_argument("--concurrency", type=int, help="cases at once (default 4)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    run.set_defaults(handler=run_suite)

    listing = actions.add_parser("list", parents=[common], help="the suites and their latest eval run")
    listing.set_defaults(handler=list_suites)


def _suite_id(ctx: Context, suite: str) -> str:
    if suite.startswith("eval_"):
        return suite
    named = [s for s in data(ctx.client.evals.list()).get("evals", []) if s.get("name") == suite]
    if len(named) != 1:
        raise UsageError(
            f"{'no' if not named else 'more than one'} suite is named {suite!r}; give its eval_id"
        )
    return str(named[0]["eval_id"])


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if args.model:
        overrides["model"] = args.model
    if args.prompt_file:
        try:
            with open(args.prompt_file, encoding="utf-8") as file:
                overrides["system_prompt"] = file.read()
        except OSError as exc:
            raise UsageError(f"cannot read --prompt-file {args.prompt_file}: {exc.strerror}") from None
    if args.max_steps is not None:
        overrides["max_steps"] = args.max_steps
    return overrides


def _bar(done: int, total: int) -> str:
    filled = BAR * done // total if total else BAR
    return f"\r[{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} cases"


def run_suite(ctx: Context) -> int:
    args = ctx.args
    eval_id = _suite_id(ctx, args.suite)
    body: dict[str, Any] = {}
    if overrides := _overrides(args):
        body["overrides"] = overrides
    if args.concurrency is not None:
        body["concurrency"] = args.concurrency
    accepted = data(ctx.client.evals.run(eval_id, body))
    eval_run_id = str(accepted["eval_run_id"])
    live = not ctx.json and not args.no_progress
    while True:
        view = data(ctx.client.evals.get_run(eval_id, eval_run_id))
        if live:
            ctx.write(_bar(int(view["done"]), int(view["total"])))
        if view["status"] != "running":
            break
        time.sleep(POLL_SECONDS)
    if live:
        ctx.write("\n")
    ctx.show(view, result_lines(view))
    failed = view["status"] != "succeeded" or bool(view.get("flipped"))
    return EXIT_RUN_FAILED if failed else EXIT_OK


def _money(value: Any) -> str:
    return "-" if value is None else f"${value:.4f}"


def _delta(value: Any, unit: str = "") -> str:
    return "-" if value is None else f"{value:+.4g}{unit}"


def result_lines(view: dict[str, Any]) -> list[str]:
    if view["status"] == "failed":
        error = view.get("error") or {}
        return [f"eval run {view['eval_run_id']} failed: {error.get('code')} {error.get('message') or ''}"]
    flipped = set(view.get("flipped") or [])
    rows = []
    for case in view.get("cases", []):
        failing = [a for a in case["assertions"] if not a["passed"]]
        why = "; ".join(f"{a['type']}: {a['reason']}" for a in failing) or (case.get("error") or {}).get(
            "code", ""
        )
        result = "PASS" if case["passed"] else ("FAIL (flipped)" if case["index"] in flipped else "FAIL")
        rows.append(
            [
                case["index"],
                clip(case.get("name") or "", 24),
                case.get("run_id") or "-",
                result,
                case.get("steps"),
                _money(case.get("cost_usd")),
                clip(why, 70),
            ]
        )
    lines = table(["CASE", "NAME", "RUN", "RESULT", "STEPS", "COST", "WHY"], rows)
    rate = view.get("pass_rate")
    lines.append(
        f"pass rate {rate:.0%} ({view.get('passed')}/{view['total']})" if rate is not None else "pass rate -"
    )
    lines.append(
        f"deltas from the baselines: cost {_delta(view.get('cost_delta_usd'))} USD, "
        f"input tokens {_delta(view.get('input_tokens_delta'))}, steps {_delta(view.get('steps_delta'))}"
    )
    if flipped:
        lines.append(f"flipped (passed before, fail now): {', '.join(str(i) for i in sorted(flipped))}")
    return lines


def list_suites(ctx: Context) -> int:
    listed = data(ctx.client.evals.list())
    rows = []
    for suite in listed.get("evals", []):
        runs = data(ctx.client.evals.runs(suite["eval_id"])).get("runs", [])
        latest = runs[0] if runs else None
        rate = latest.get("pass_rate") if latest else None
        rows.append(
            [
                suite["eval_id"],
                clip(suite["name"], 30),
                suite["cases"],
                latest["status"] if latest else "never run",
                "-" if rate is None else f"{rate:.0%}",
            ]
        )
    ctx.show(listed, table(["EVAL", "NAME", "CASES", "LATEST", "PASS RATE"], rows) if rows else ["no suites"])
    return 0

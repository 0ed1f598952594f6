"""The `stepwise` command: its argument parser, and turning what a command raised into an exit code.

Exit codes: 0 done (a followed run succeeded); 1 a followed run failed, was cancelled or timed out;
2 the API refused the request, the API was unreachable, or the command line was unusable.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

import httpx
import pydantic

from stepwise_cli import (
    agents,
    answers,
    effects,
    evals,
    keys,
    migrate,
    runs,
    schedules,
    settings,
    triggers,
    usage,
    workflows,
)
from stepwise_cli.client import Hinted, error_body, resolve_target, unreachable_hint
from stepwise_cli.context import EXIT_ERROR, EXIT_INTERRUPTED, Context, UsageError
from stepwise_cli.render import detail_lines
from stepwise_sdk import ApiConnectionError, ApiStatusError, RetryPolicy, StepwiseError

DESCRIPTION = """\
Drive a Stepwise stack from a terminal: agents, runs followed live, approvals, client tools,
schedules and settings. It talks to the local stack (`make run`) unless told otherwise."""

EPILOG = """\
environment:
  STEPWISE_URL      the API's base URL (default http://127.0.0.1:$PORT, PORT defaulting to 3000)
  STEPWISE_API_KEY  the API key (default $STEPWISE_LOCAL_API_KEY, else sk-local-dev)

--url, --key and --json go before or after the command: `stepwise --json agents list` and
`stepwise agents list --json` are the same.

exit codes: 0 ok (a followed run succeeded), 1 a followed run failed, was cancelled or timed out,
2 an error (from the API, the connection or the command line)."""


def _target_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    default = None if top else argparse.SUPPRESS  # given after the command, an option overrides
    parser.add_argument("--url", default=default, help="the API's base URL (env STEPWISE_URL)")
    parser.add_argument("--key", default=default, help="the API key (env STEPWISE_API_KEY)")
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="machine output: the API's JSON (one event per line while following)",
    )


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _target_options(common, top=False)
    parser = argparse.ArgumentParser(
        prog="stepwise",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _target_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (
        agents,
        runs,
        answers,
        schedules,
        settings,
        evals,
        keys,
        usage,
        effects,
        migrate,
        workflows,
        triggers,
    ):
        module.register(commands, common)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
    retries: RetryPolicy | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Runs one command and returns its exit code. The keyword arguments are seams for tests: another
    environment, an in-memory HTTP transport, another retry policy, other streams."""
    args = build_parser().parse_args(argv)
    target = resolve_target(args.url, args.key, os.environ if environ is None else environ)
    ctx = Context(
        args=args,
        target=target,
        stdout=stdout or sys.stdout,
        stderr=stderr or sys.stderr,
        stdin=stdin or sys.stdin,
        transport=transport,
        retries=retries,
    )
    try:
        return int(args.handler(ctx))
    except Hinted as exc:
        _report(ctx, exc.error)
        ctx.note(f"hint: {exc.hint}")
        return EXIT_ERROR
    except ApiStatusError as exc:
        _report(ctx, exc)
        return EXIT_ERROR
    except ApiConnectionError as exc:
        ctx.note(f"error: cannot reach {exc.url}: {exc.reason}")
        ctx.note(f"hint: {unreachable_hint(exc)}")
        return EXIT_ERROR
    except StepwiseError as exc:  # an answer not in the spec's shape
        ctx.note(f"error: {exc.code}: {exc.message}")
        return EXIT_ERROR
    except pydantic.ValidationError as exc:  # the SDK checked the request before sending it
        ctx.note(f"error: invalid request: {exc.error_count()} problem(s)")
        for error in exc.errors():
            ctx.note(f"  {'.'.join(map(str, error['loc']))}: {error['msg']}")
        return EXIT_ERROR
    except UsageError as exc:
        ctx.note(f"error: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `stepwise runs list | head`: the reader is gone, and so is the point
        _silence(ctx.stdout)
        return EXIT_ERROR
    finally:
        ctx.close()


def _report(ctx: Context, exc: ApiStatusError) -> None:
    ctx.note(f"error: {exc.code}: {exc.message}")
    if ctx.json:
        ctx.note(json.dumps(error_body(exc), ensure_ascii=False))
    else:
        for line in detail_lines(exc.details):
            ctx.note(f"  {line}")


def _silence(stream: TextIO) -> None:
    """Points the stream's descriptor at /dev/null, so flushing it at exit does not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # not a real file (a test's buffer): nothing will flush it at exit

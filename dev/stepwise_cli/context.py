"""What every command gets: its parsed arguments, the API, and where and how to write."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

import httpx

from stepwise_cli.client import Target, connect
from stepwise_sdk import RetryPolicy, Stepwise

# Exit codes: a followed run that succeeded or any other command that worked; a followed run that ended
# another way; an error (the API's, the connection's, the command line's); Ctrl-C.
EXIT_OK, EXIT_RUN_FAILED, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """The command line names something unusable (an unreadable file, an --output that is not JSON)."""


@dataclass
class Context:
    args: argparse.Namespace
    target: Target
    stdout: TextIO
    stderr: TextIO
    stdin: TextIO
    transport: httpx.BaseTransport | None = None
    retries: RetryPolicy | None = None
    _client: Stepwise | None = field(default=None, init=False)

    @property
    def client(self) -> Stepwise:
        if self._client is None:  # built on first use: `keys create` talks to DynamoDB, not to the API
            self._client = connect(self.target, self.transport, self.retries)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    @property
    def cli(self) -> str:
        """How to call this CLI again in a printed command: the --url too when it was given (never the
        key: printed commands end up in scrollback and logs)."""
        return "stepwise" + (f" --url {self.target.url}" if self.target.url_given else "")

    def write(self, text: str) -> None:
        if text:
            self.stdout.write(text)
            self.stdout.flush()  # a followed run is watched live, also through a pipe

    def lines(self, lines: Iterable[str]) -> None:
        self.write("".join(f"{line}\n" for line in lines))

    def show(self, data: Any, lines: Iterable[str]) -> None:
        """`data` as JSON with --json, else the human lines."""
        if self.json:
            self.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        else:
            self.lines(lines)

    def note(self, text: str) -> None:
        self.stderr.write(text + "\n")
        self.stderr.flush()


def read_json(path: str, what: str) -> Any:
    """A JSON file named on the command line; a missing or malformed one is a UsageError naming it."""
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{what} {path} is not valid JSON: {exc}") from None

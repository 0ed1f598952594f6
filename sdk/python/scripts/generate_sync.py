"""Writes the SDK's sync client, `_sync.py`, from the async one, `_async.py` (`make sdk-sync`).

An unasync-style token rewrite: `async` and `await` go, `AsyncX` becomes `X` and the async dunders and
methods become their sync twins. Only names are rewritten, never strings or comments, so what the
rewrite cannot say (the module docstring, which module sleeps) is an exact replacement in REPLACEMENTS.
The `unasync` package does the same rewrite, but only file to file (the test checks in memory), with
its own `AsyncX -> SyncX` naming (an override per class) and without the replacements or the header.

Standard library only, so `python3 sdk/python/scripts/generate_sync.py` runs without the venv.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "stepwise_sdk"
SOURCE, TARGET = PACKAGE / "_async.py", PACKAGE / "_sync.py"
HEADER = "# Generated from _async.py by sdk/python/scripts/generate_sync.py: do not edit by hand.\n"

# Applied to the async source before the token rewrite; each must match, so none goes stale unseen.
REPLACEMENTS = {
    '"""`AsyncStepwise`, the asynchronous client: `_sync.py` is generated from this file."""': (
        '"""`Stepwise`, the synchronous client. `_async.py` is the same surface with every call awaited."""'
    ),
    "import asyncio\n": "",
    "asyncio.sleep(": "time.sleep(",
}
# Names whose sync twin is not the name without its `Async` prefix.
RENAMES = {
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "StopAsyncIteration": "StopIteration",
    "aclose": "close",
}
ASYNC_PREFIX = re.compile(r"^Async(?=[A-Z])")


def generate(source: str) -> str:
    """The text of `_sync.py` for the text of `_async.py`."""
    for old, new in REPLACEMENTS.items():
        if old not in source:
            raise ValueError(f"generate_sync.py: {old!r} is no longer in _async.py; update REPLACEMENTS")
        source = source.replace(old, new)
    return HEADER + unasync(source)


def unasync(source: str) -> str:
    """`source` with `async` and `await` dropped (with the space after them) and names made sync."""
    starts = [0]
    for line in io.StringIO(source):
        starts.append(starts[-1] + len(line))
    out: list[str] = []
    done = 0  # the offset in `source` up to which `out` holds the result
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.NAME:
            continue
        begin = starts[token.start[0] - 1] + token.start[1]
        end = starts[token.end[0] - 1] + token.end[1]
        out.append(source[done:begin])
        if token.string in ("async", "await"):
            while source.startswith(" ", end):
                end += 1
        else:
            out.append(RENAMES.get(token.string, ASYNC_PREFIX.sub("", token.string)))
        done = end
    out.append(source[done:])
    return "".join(out)


if __name__ == "__main__":
    TARGET.write_text(generate(SOURCE.read_text()))

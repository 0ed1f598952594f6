"""A code tool's source: the check at creation that it defines `run`, and the program the sandbox runs.

The sandbox contract is code_execute's (a program in, stdout/stderr/exit code out), so a code tool needs
nothing more of a sandbox service. The program is a small harness around the tenant's source: it loads
the source (Python: `exec` of the source text; JavaScript: `import()` of a `data:` URL, so the source is
an ES module with `export function run(args)`), calls `run` with the arguments (awaiting it when it is
async), and writes one envelope line to stdout after a per-call marker:

    {"status": "ok", "value": <the JSON return value>}
    {"status": "error" | "load_error", "type", "message", "traceback"}
    {"status": "no_entry"}                      the source defines no callable `run`
    {"status": "not_json", "type", "message"}   the return value is not JSON (NaN and Infinity included)

Whatever the tool itself prints comes before the marker and is not part of the result. The marker is
random per call, so a value the tool prints cannot pass for its result by accident.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import secrets
import threading
from typing import Literal

Language = Literal["python", "javascript"]
MARK_PREFIX = "__stepwise_result_"
PYTHON_FILE = "tool.py"
JAVASCRIPT_FILE = "tool.mjs"
_JS_EXPORTS_RUN = re.compile(
    r"\bexport\s+(?:async\s+)?function\s*\*?\s*run\s*\("
    r"|\bexport\s+(?:const|let|var)\s+run\b"
    r"|\bexport\s*\{[^}]*\brun\b[^}]*\}"
)


# CPython 3.11 keeps the AST builder's recursion depth in interpreter-wide state (gh-106905): two threads
# parsing at once can fail with "SystemError: AST constructor recursion depth mismatch". Lambda serves one
# request per process, but the local stack's threads validate stored agents concurrently (a list of a
# tenant's agents failed so), hence the lock; and every read of an agent validates its code tools again,
# hence the cache.
_PARSING = threading.Lock()


@functools.lru_cache(maxsize=64)
def entry_problem(language: Language, source: str) -> str | None:
    """Why `source` cannot be a code tool (None when it can), found without running it: Python is parsed
    and must bind `run` at module level; JavaScript must export `run` (checked by pattern: a JavaScript
    parser is not worth shipping to say so, and the sandbox reports anything subtler as the call's
    error)."""
    if "\x00" in source:
        return "source may not contain NUL characters"
    if language == "javascript":
        if _JS_EXPORTS_RUN.search(source) is None:
            return "a JavaScript code tool must export its entry point: export function run(args) { ... }"
        return None
    try:
        with _PARSING:
            tree = ast.parse(source, filename=PYTHON_FILE)
    except SyntaxError as exc:
        return f"source is not valid Python: line {exc.lineno}: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"source is not valid Python: {type(exc).__name__}"
    if "run" not in _module_names(tree.body):
        return "a Python code tool must define its entry point at module level: def run(args): ..."
    return None


def _module_names(body: list[ast.stmt]) -> set[str]:
    """The names a module body binds at its top level, through if/try/with blocks (not inside defs)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.With | ast.AsyncWith):
            names |= _module_names(node.body) | _module_names(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try | ast.TryStar):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                names |= _module_names(block)
    return names


def new_mark() -> str:
    return f"{MARK_PREFIX}{secrets.token_hex(16)}:"


def program(language: Language, source: str, arguments_json: str, mark: str) -> str:
    """The program the sandbox runs: the harness with the source, the arguments and the marker in it."""
    if language == "python":
        # repr() is a Python literal for any str; json.dumps would split astral characters in two.
        return f"{_PYTHON_HARNESS}\n_stepwise_main({source!r}, {arguments_json!r}, {mark!r})\n"
    literal = json.dumps  # a JSON string is a JavaScript string literal (ASCII-escaped)
    return (
        f"const SOURCE = {literal(source)};\nconst ARGUMENTS = JSON.parse({literal(arguments_json)});\n"
        f"const MARK = {literal(mark)};\n{_JAVASCRIPT_HARNESS}"
    )


_PYTHON_HARNESS = f"""\
import asyncio as _asyncio, inspect as _inspect, json as _json, os as _os, sys as _sys
import traceback as _traceback


def _stepwise_main(source, arguments_json, mark):
    def emit(text):
        _sys.stdout.flush()
        _sys.__stdout__.write("\\n" + mark + text + "\\n")
        _sys.__stdout__.flush()
        _sys.__stderr__.flush()
        _os._exit(0)  # threads the tool left running must not hold the sandbox until its time limit

    def failed(status, exc):
        trace = _traceback.TracebackException.from_exception(exc)
        # Only the tool's own frames: the harness is not the tenant's to read.
        trace.stack = _traceback.StackSummary.from_list(
            [frame for frame in trace.stack if frame.filename == {PYTHON_FILE!r}]
        )
        envelope = {{
            "status": status,
            "type": type(exc).__name__,
            "message": str(exc),
            "traceback": "".join(trace.format()),
        }}
        emit(_json.dumps(envelope))

    namespace = {{"__name__": "stepwise_tool"}}
    try:
        exec(compile(source, {PYTHON_FILE!r}, "exec"), namespace)
    except BaseException as exc:
        failed("load_error", exc)
    run = namespace.get("run")
    if not callable(run):
        emit(_json.dumps({{"status": "no_entry"}}))
    try:
        value = run(_json.loads(arguments_json))
        if _inspect.isawaitable(value):
            async def settle(awaitable):
                return await awaitable

            value = _asyncio.run(settle(value))
    except BaseException as exc:
        failed("error", exc)
    try:
        text = _json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError) as exc:
        emit(_json.dumps({{"status": "not_json", "type": type(value).__name__, "message": str(exc)}}))
    emit('{{"status": "ok", "value": ' + text + "}}")
"""

_JAVASCRIPT_HARNESS = f"""\
const MODULE_URL = "data:text/javascript," + encodeURIComponent(SOURCE);

function emit(envelope) {{
  const line = "\\n" + MARK + envelope + "\\n";
  const proc = globalThis.process;
  // Exit once written: timers the tool left behind must not hold the sandbox until its time limit.
  if (proc && proc.stdout && typeof proc.exit === "function") proc.stdout.write(line, () => proc.exit(0));
  else console.log(line);
}}

function failed(status, err) {{
  const isError = err instanceof Error;
  const file = {json.dumps(JAVASCRIPT_FILE)};
  const stack = isError && err.stack ? String(err.stack).split(MODULE_URL).join(file) : "";
  // Only the tool's own frames: the harness and Node's loader are not the tenant's to read.
  const own = (line, i) => i === 0 || line.includes(file);
  const trace = stack.split("\\n").filter(own).join("\\n");
  emit(JSON.stringify({{
    status,
    type: isError ? err.name : typeof err,
    message: isError ? err.message : String(err),
    traceback: trace,
  }}));
}}

function finite(key, value) {{
  if (typeof value === "number" && !Number.isFinite(value)) throw new TypeError(`${{value}} is not JSON`);
  if (typeof value === "bigint") throw new TypeError("a BigInt is not JSON");
  return value;
}}

(async () => {{
  let mod;
  try {{
    mod = await import(MODULE_URL);
  }} catch (err) {{
    return failed("load_error", err);
  }}
  if (typeof mod.run !== "function") return emit(JSON.stringify({{ status: "no_entry" }}));
  let value;
  try {{
    value = await mod.run(ARGUMENTS);
  }} catch (err) {{
    return failed("error", err);
  }}
  let text;
  try {{
    text = JSON.stringify(value, finite);
  }} catch (err) {{
    return emit(JSON.stringify({{ status: "not_json", type: typeof value, message: String(err.message) }}));
  }}
  if (text === undefined) {{
    const message = `${{typeof value}} is not JSON`;
    return emit(JSON.stringify({{ status: "not_json", type: typeof value, message }}));
  }}
  emit('{{"status": "ok", "value": ' + text + "}}");
}})();
"""

"""Code tools without a sandbox: the entry-point check at creation and reading the harness's answer."""

from __future__ import annotations

import pytest

from stepwise.tools.builtin.code_execute import SandboxAnswer
from stepwise.tools.code_source import MARK_PREFIX, entry_problem, new_mark
from stepwise.tools.code_tool import outcome
from stepwise.tools.models import CodeTool

TOOL = CodeTool(
    type="code",
    name="t",
    description="d",
    input_schema={"type": "object"},
    language="python",
    source="def run(args):\n    return args\n",
)


@pytest.mark.parametrize(
    "source",
    [
        "def run(args):\n    return 1\n",
        "async def run(args):\n    return 1\n",
        "run = lambda args: 1\n",
        "from json import dumps as run\n",
        "class run:\n    def __init__(self, args): pass\n",
        "try:\n    import fast\n    run = fast.run\n"
        "except ImportError:\n    def run(args):\n        return 0\n",
        "if True:\n    def run(args):\n        return 1\n",
    ],
)
def test_python_sources_that_bind_run_at_module_level_are_accepted(source: str) -> None:
    assert entry_problem("python", source) is None


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("def main(args):\n    def run(x): pass\n", "def run(args)"),
        ("def run(args)\n    return 1\n", "line 1"),
        ("x = '\x00'", "NUL"),
    ],
)
def test_python_sources_without_run_or_not_python_are_refused(source: str, needle: str) -> None:
    problem = entry_problem("python", source)
    assert problem is not None and needle in problem


@pytest.mark.parametrize(
    "source",
    [
        "export function run(args) { return 1 }",
        "export async function run(args) { return 1 }",
        "export const run = (args) => 1;",
        "function main(a) { return a }\nexport { main as run };",
    ],
)
def test_javascript_modules_that_export_run_are_accepted(source: str) -> None:
    assert entry_problem("javascript", source) is None


@pytest.mark.parametrize("source", ["function run(a) { return a }", "module.exports.run = (a) => a;"])
def test_javascript_without_an_exported_run_is_refused(source: str) -> None:
    assert "export function run" in (entry_problem("javascript", source) or "")


def test_the_result_is_the_line_after_this_calls_marker_not_a_look_alike_the_tool_printed() -> None:
    mark = new_mark()
    forged = f'{MARK_PREFIX}{"0" * 32}:{{"status": "ok", "value": "forged"}}'
    stdout = f'{forged}\nhello\n\n{mark}{{"status": "ok", "value": {{"real": true}}}}\n'

    result = outcome(TOOL, SandboxAnswer(stdout=stdout, exit_code=0), mark)

    assert result.output == {"real": True}


def test_a_process_that_died_before_answering_is_a_code_error_with_its_stderr() -> None:
    answer = SandboxAnswer(stdout="partial", stderr="Killed: out of memory\n", exit_code=137)

    result = outcome(TOOL, answer, new_mark())

    assert result.error is not None and result.error.code == "code_error"
    assert "exit code 137" in result.error.message and "out of memory" in result.error.message


def test_a_source_without_run_at_call_time_is_an_invalid_tool() -> None:
    mark = new_mark()
    result = outcome(TOOL, SandboxAnswer(stdout=f'{mark}{{"status": "no_entry"}}\n', exit_code=0), mark)
    assert result.error is not None and result.error.code == "invalid_tool"

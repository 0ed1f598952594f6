"""`stepwise run` against the local stack follows a delegation tree: each child's steps in a block
indented under the call that started it, named by its tool; concurrent children followed at once."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from stepwise_cli import main
from tests.e2e.support import KEY


def run_cli(base_url: str, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["--url", base_url, "--key", KEY, *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    return code, captured.out.splitlines()


def agent(api: httpx.Client, name: str, *tools: Any, **fields: Any) -> str:
    created = api.post("/v1/agents", json={"name": name, "tools": list(tools), **fields})
    assert created.status_code == 201, created.text
    return str(created.json()["agent_id"])


def agent_tool(name: str, agent_id: str, **extra: Any) -> dict[str, Any]:
    return {"type": "agent", "name": name, "description": f"Ask {name}.", "agent_id": agent_id, **extra}


def ask(name: str, message: str) -> dict[str, Any]:
    return {"name": name, "arguments": {"message": message}}


def follow_run(
    base_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, agent_id: str, script: list[Any]
) -> list[str]:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    _, lines = run_cli(base_url, capsys, "run", agent_id, "go", "--script", str(path))
    print("\n".join(lines))  # shown when the test fails
    return lines


IDS = re.compile(r"\b(run|ses)_[0-9A-Z]{26}\b")


def block(lines: list[str], prefix: str) -> list[str]:
    """A child's lines, without their prefix, with run and session ids shown as `run_…` and `ses_…`."""
    return [IDS.sub(r"\1_…", line.removeprefix(prefix)) for line in lines if line.startswith(prefix)]


def test_two_concurrent_children_are_followed_in_blocks_under_their_calls(
    base_url: str, api: httpx.Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first = agent(api, "first")  # no tools: the scripted model echoes its message
    second = agent(api, "second")
    tools = [agent_tool("research", first, read_only=True), agent_tool("refund", second, read_only=True)]
    coordinator = agent(api, "coordinator", *tools)

    lines = follow_run(
        base_url,
        capsys,
        tmp_path,
        coordinator,
        [{"tool_calls": [ask("research", "one"), ask("refund", "two")]}, {"text": "both done"}],
    )

    for tool, said in (("research", "one"), ("refund", "two")):
        prefix = f"  [{tool}] "
        target = first if tool == "research" else second
        shown = block(lines, prefix)
        assert shown[:-1] == [
            f"run run_… started: agent {target}, session ses_…, up to 25 steps",
            "step 1",
            f"  You said: {said}",  # the child's streamed answer
        ]
        assert shown[-1].startswith("succeeded in 1 steps, tokens: ")
        opened = next(i for i, line in enumerate(lines) if line.startswith(f"  => {tool}: delegated to run "))
        closed = next(i for i, line in enumerate(lines) if line.startswith(f"  <= {tool}: run "))
        inside = [i for i, line in enumerate(lines) if line.startswith(prefix)]
        assert opened < min(inside) and max(inside) < closed, lines
        assert lines[closed].endswith(" succeeded")
        assert lines.index(f"  <- {tool}: You said: {said}") > closed
    # Both started before either block closed: the children ran, and were followed, at once.
    starts = [i for i, line in enumerate(lines) if line.startswith("  => ")]
    ends = [i for i, line in enumerate(lines) if line.startswith("  <= ")]
    assert len(starts) == len(ends) == 2 and max(starts) < min(ends)
    assert lines[-2] == "  both done"
    assert lines[-1].startswith("succeeded in 2 steps")


def test_a_two_level_chain_nests_the_grandchild_inside_the_child(
    base_url: str, api: httpx.Client, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    leaf = agent(api, "leaf")
    script = [{"tool_calls": [ask("to_leaf", "deep")]}, {"text": "middle done"}]
    middle = agent(api, "middle", agent_tool("to_leaf", leaf), script=script)
    root = agent(api, "root", agent_tool("to_middle", middle))

    lines = follow_run(
        base_url, capsys, tmp_path, root, [{"tool_calls": [ask("to_middle", "go on")]}, {"text": "root done"}]
    )

    middle_lines = block(lines, "  [to_middle] ")
    assert middle_lines[:3] == [
        f"run run_… started: agent {middle}, session ses_…, up to 25 steps",
        "step 1",
        '  -> to_leaf(message="deep")',
    ]
    assert middle_lines[3].startswith("  => to_leaf: delegated to run run_…")
    assert middle_lines[4:-1] == [
        "  <= to_leaf: run run_… succeeded",
        "  <- to_leaf: You said: deep",
        "step 2",
        "  middle done",
    ]
    assert middle_lines[-1].startswith("succeeded in 2 steps, tokens: ")
    leaf_lines = block(lines, "    [to_leaf] ")
    assert leaf_lines[:-1] == [
        f"run run_… started: agent {leaf}, session ses_…, up to 25 steps",
        "step 1",
        "  You said: deep",
    ]
    assert leaf_lines[-1].startswith("succeeded in 1 steps, tokens: ")
    opened = lines.index(next(line for line in lines if line.startswith("  [to_middle]   => to_leaf: ")))
    leaf_at = [i for i, line in enumerate(lines) if line.startswith("    [to_leaf] ")]
    closed = lines.index(next(line for line in lines if line.startswith("  [to_middle]   <= to_leaf: ")))
    assert opened < min(leaf_at) and max(leaf_at) < closed
    assert lines.index(next(line for line in lines if line.startswith("  <= to_middle: "))) > closed
    assert "  <- to_middle: middle done" in lines and lines[-2] == "  root done"

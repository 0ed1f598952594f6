"""The `stepwise` CLI against the local stack over HTTP: in process (`main([...])`) for most commands,
and as `python -m stepwise_cli` where a real process matters (stdin, a run followed live)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stepwise_cli import main
from tests.e2e.support import KEY, free_port
from tests.eventually import eventually
from tests.fakes.receiver import Receiver


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


Cli = Callable[..., Result]


@pytest.fixture
def cli(base_url: str, capsys: pytest.CaptureFixture[str]) -> Cli:
    def run(*argv: str) -> Result:
        capsys.readouterr()  # drop anything printed before
        code = main(["--url", base_url, "--key", KEY, *argv])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def process_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("STEPWISE_")}


def python_m(base_url: str, *argv: str, stdin: str | None = None) -> Result:
    done = subprocess.run(
        [sys.executable, "-m", "stepwise_cli", "--url", base_url, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=90,
        env=process_env(),
    )
    return Result(done.returncode, done.stdout, done.stderr)


def http_tool(receiver: Receiver, name: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "http",
        "name": name,
        "description": f"{name} something",
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
        "endpoint": f"{receiver.url}/{name}",
        **extra,
    }


def write_json(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value))
    return str(path)


def create_agent(cli: Cli, tmp_path: Path, *tools: dict[str, Any]) -> str:
    created = cli(
        "agents",
        "create",
        "--name",
        "cli-e2e",
        "--tool-file",
        write_json(tmp_path / "t.json", tools),
        "--json",
    )
    assert created.code == 0, created.err
    return str(created.json()["agent_id"])


def start(cli: Cli, agent_id: str, script: list[dict[str, Any]], tmp_path: Path) -> dict[str, Any]:
    started = cli(
        "run", agent_id, "go", "--script", write_json(tmp_path / "s.json", script), "--no-follow", "--json"
    )
    assert started.code == 0, started.err
    return dict(started.json())


def pending(cli: Cli, session_id: str) -> list[dict[str, Any]]:
    listed = cli("interactions", session_id, "--pending", "--json")
    assert listed.code == 0, listed.err
    return list(listed.json()["interactions"])


def send(to: str) -> list[dict[str, Any]]:
    return [{"tool_calls": [{"name": "send_email", "arguments": {"to": to}}]}, {"text": "sent"}]


def test_create_an_agent_and_follow_a_scripted_run_to_its_answer(
    cli: Cli, receiver: Receiver, tmp_path: Path
) -> None:
    agent_id = create_agent(cli, tmp_path, http_tool(receiver, "notify"))
    script = [{"tool_calls": [{"name": "notify", "arguments": {"to": "ops"}}]}, {"text": "Told ops."}]

    followed = cli("run", agent_id, "tell ops", "--script", write_json(tmp_path / "s.json", script))

    assert followed.code == 0, followed.out + followed.err
    lines = followed.out.splitlines()
    assert lines[0].startswith("run run_") and f"agent {agent_id}" in lines[0]
    assert '  -> notify(to="ops")' in lines
    assert '  <- notify: {"ok": true}' in lines
    assert "Told ops." in followed.out
    assert lines[-1].startswith("succeeded in 2 steps, tokens: ")
    assert [r.json() for r in receiver.to("/notify")] == [{"to": "ops"}]

    shown = cli("agents", "get", agent_id)
    listed = cli("agents", "list", "--json")
    assert "notify (http, permission inherit)" in shown.out
    assert agent_id in [a["agent_id"] for a in listed.json()["agents"]]


def test_replaying_a_succeeded_run_is_refused_unless_forced(
    base_url: str, cli: Cli, demo_agent_id: str
) -> None:
    done = cli("run", demo_agent_id, "What is the weather in Paris?", "--json")
    assert done.code == 0, done.err
    run_id = json.loads(done.out.splitlines()[-1])["run_id"]

    refused = cli("runs", "replay", run_id)
    forced = cli("runs", "replay", run_id, "--force", "--json")

    assert refused.code == 2
    assert refused.err.startswith("error: run_succeeded: ")
    assert refused.err.splitlines()[-1] == (
        f"hint: to replay anyway: stepwise --url {base_url} runs replay {run_id} --force"
    )
    assert forced.code == 0, forced.err
    assert forced.json()["replay_of"] == run_id
    assert cli("runs", "follow", forced.json()["run_id"]).code == 0


def test_a_run_waiting_for_approval_is_approved_then_followed_to_the_end(
    cli: Cli, receiver: Receiver, tmp_path: Path
) -> None:
    agent_id = create_agent(cli, tmp_path, http_tool(receiver, "send_email", permission="ask"))
    accepted = start(cli, agent_id, send("ceo@example.com"), tmp_path)
    waiting = eventually(lambda: pending(cli, accepted["session_id"]), interval=0.1, what="the approval")
    assert [(i["kind"], i["tool_name"]) for i in waiting] == [("approval", "send_email")]
    assert receiver.to("/send_email") == []

    approved = cli("approve", accepted["run_id"], "--reason", "fine")
    followed = cli("runs", "follow", accepted["run_id"])

    assert approved.code == 0, approved.err
    assert approved.out.startswith('approved send_email(to="ceo@example.com")')
    assert followed.code == 0, followed.out
    assert "  ! approval needed: send_email" in followed.out
    assert "  send_email approved by api: fine" in followed.out
    assert followed.out.splitlines()[-1].startswith("succeeded in 2 steps")
    assert [r.json() for r in receiver.to("/send_email")] == [{"to": "ceo@example.com"}]
    shown = cli("runs", "get", accepted["run_id"], "--json")
    assert (shown.json()["status"], shown.json()["tools_executed"]) == ("succeeded", ["send_email"])


def test_a_followed_run_prints_the_approve_command_that_completes_it(
    base_url: str, receiver: Receiver, tmp_path: Path, cli: Cli
) -> None:
    agent_id = create_agent(cli, tmp_path, http_tool(receiver, "send_email", permission="ask"))
    script = write_json(tmp_path / "s.json", send("cfo@example.com"))
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stepwise_cli",
            "--url",
            base_url,
            "run",
            agent_id,
            "mail",
            "--script",
            script,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=process_env(),
    )
    try:
        output, closed = read_lines(follower)
        command = eventually(
            lambda: next((line for line in output if "approve: " in line), None),
            timeout=60,
            interval=0.1,
            what="the follower to print the approve command",
        )
        argv = shlex.split(command.split("approve: ", 1)[1])
        assert argv[:3] == ["stepwise", "--url", base_url]

        approved = subprocess.run(
            [sys.executable, "-m", "stepwise_cli", *argv[1:]],
            capture_output=True,
            text=True,
            timeout=60,
            env=process_env(),
        )

        assert approved.returncode == 0, approved.stderr
        assert follower.wait(60) == 0
        assert closed.wait(10)
        rest = "".join(output)
        assert '<- send_email: {"ok": true}' in rest and "succeeded in 2 steps" in rest
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(10)


def read_lines(process: subprocess.Popen[str]) -> tuple[list[str], threading.Event]:
    """The process's output lines as they arrive (the CLI flushes every event), and an event set at EOF."""
    assert process.stdout is not None
    stdout = process.stdout
    output: list[str] = []
    closed = threading.Event()

    def read() -> None:
        for line in stdout:
            output.append(line)
        closed.set()

    threading.Thread(target=read, daemon=True, name="cli-follower-stdout").start()
    return output, closed


def test_a_client_tool_is_answered_with_respond(cli: Cli, tmp_path: Path) -> None:
    pick = {
        "type": "client",
        "name": "pick",
        "description": "Ask the app",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    agent_id = create_agent(cli, tmp_path, pick)
    script: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "pick", "arguments": {"q": "which?"}}]},
        {"text": "picked"},
    ]
    accepted = start(cli, agent_id, script, tmp_path)
    [waiting] = eventually(
        lambda: pending(cli, accepted["session_id"]), interval=0.1, what="the client tool's request"
    )
    respond = ["respond", waiting["interaction_id"], "--tool-call-id", waiting["tool_call_id"]]

    answered = cli(*respond, "--output", '{"choice": "b"}', "--idempotency-key", "k-1")
    repeated = cli(*respond, "--output", '{"choice": "b"}', "--idempotency-key", "k-1")
    followed = cli("runs", "follow", accepted["run_id"])

    assert answered.code == 0, answered.err
    assert repeated.code == 0, repeated.err  # the same key and answer: accepted, nothing twice
    assert followed.code == 0, followed.out
    assert '  ? client tool waits for your app: pick(q="which?")' in followed.out
    assert '  <- pick: {"choice": "b"}' in followed.out
    assert followed.out.count("pick answered by the app: completed") == 1


def test_a_cancelled_run_exits_1_and_can_be_replayed(cli: Cli, receiver: Receiver, tmp_path: Path) -> None:
    agent_id = create_agent(cli, tmp_path, http_tool(receiver, "send_email", permission="ask"))
    accepted = start(cli, agent_id, send("x@example.com"), tmp_path)
    eventually(lambda: pending(cli, accepted["session_id"]), interval=0.1, what="the approval")

    cancelled = cli("runs", "cancel", accepted["run_id"])
    followed = cli("runs", "follow", accepted["run_id"])
    listed = cli("runs", "list", "--agent", agent_id, "--status", "cancelled", "--json")
    replayed = cli("runs", "replay", accepted["run_id"], "--json")  # it executed no tool: safe

    assert cancelled.code == 0 and cancelled.out.strip().endswith("is cancelled")
    assert followed.code == 1
    assert followed.out.splitlines()[-1] == "cancelled: cancelled on request"
    assert [r["run_id"] for r in listed.json()["runs"]] == [accepted["run_id"]]
    assert replayed.code == 0, replayed.err
    assert replayed.json()["replay_of"] == accepted["run_id"]
    assert cli("runs", "cancel", replayed.json()["run_id"]).code == 0


def test_settings_are_written_and_listed_but_never_printed(base_url: str, cli: Cli) -> None:
    from_stdin = python_m(base_url, "settings", "put", "CLI_E2E_PIPED", stdin="piped-s3cret\n")
    from_flag = cli("settings", "put", "CLI_E2E_FLAG", "--value", "flag-s3cret", "--json")
    listed = cli("settings", "list")
    listed_json = cli("settings", "list", "--json")
    deleted = cli("settings", "delete", "CLI_E2E_FLAG")

    assert from_stdin.code == 0, from_stdin.err
    assert from_stdin.out.startswith("set CLI_E2E_PIPED")
    assert from_flag.code == 0 and from_flag.json()["key"] == "CLI_E2E_FLAG"
    assert "CLI_E2E_PIPED" in listed.out and "CLI_E2E_FLAG" in listed.out
    assert {"CLI_E2E_PIPED", "CLI_E2E_FLAG"} <= {s["key"] for s in listed_json.json()["settings"]}
    assert deleted.code == 0
    everything = "".join(r.out + r.err for r in (from_stdin, from_flag, listed, listed_json, deleted))
    assert "s3cret" not in everything


def test_schedules_are_created_listed_and_deleted(cli: Cli, demo_agent_id: str) -> None:
    created = cli(
        "schedules", "create", demo_agent_id, "--expression", "rate(1 hour)", "--message", "tick", "--json"
    )
    schedule_id = created.json()["schedule_id"]
    listed = cli("schedules", "list", demo_agent_id, "--json")
    bad = cli("schedules", "create", demo_agent_id, "--expression", "rate(banana)", "--message", "x")
    deleted = cli("schedules", "delete", demo_agent_id, schedule_id)

    assert created.code == 0 and created.json()["expression"] == "rate(1 hour)"
    assert schedule_id in [s["schedule_id"] for s in listed.json()["schedules"]]
    assert bad.code == 2 and bad.err.startswith("error: validation_error: ")
    assert deleted.code == 0
    assert schedule_id not in cli("schedules", "list", demo_agent_id).out


def test_api_errors_exit_2_and_json_output_parses(base_url: str, cli: Cli, demo_agent_id: str) -> None:
    missing = cli("agents", "get", "agt_missing")
    missing_json = cli("agents", "get", "agt_missing", "--json")
    wrong_key = cli("agents", "list", "--key", "sk-not-a-key")
    followed = python_m(base_url, "--json", "run", demo_agent_id, "What is the weather in Paris?")

    assert (missing.code, missing.out) == (2, "")
    assert missing.err.startswith("error: agent_not_found: ")
    assert json.loads(missing_json.err.splitlines()[1])["error"]["code"] == "agent_not_found"
    assert wrong_key.code == 2 and "invalid_api_key" in wrong_key.err
    assert followed.code == 0, followed.err
    records = [json.loads(line) for line in followed.out.splitlines()]
    assert records[0]["status"] == "queued"
    assert [r["type"] for r in records[1:-1]][-1] == "run_completed"
    assert records[-1]["status"] == "succeeded"


def test_nothing_listening_exits_2_with_a_hint_to_run_the_stack() -> None:
    port = free_port()
    started = time.monotonic()

    result = python_m(f"http://127.0.0.1:{port}", "agents", "list")

    assert result.code == 2
    assert f"cannot reach http://127.0.0.1:{port}: connection refused" in result.err
    assert "make run" in result.err
    assert time.monotonic() - started < 30

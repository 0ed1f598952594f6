"""`make run` remembers: the local stack restarted on the same state directory keeps what it stored, and
fails the runs whose executions the restart took away. Each test starts `python -m stepwise_local`
itself (on a state directory under tmp_path), since restarting is the point."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tests.e2e.support import KEY, READY, free_port
from tests.eventually import eventually
from tests.fakes.receiver import Receiver, Reply

# Each test starts the whole local stack twice (a restart), and make test runs two workers side by
# side: pytest's default 120 s would be the machine's load talking, not a hang.
pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
ASK_SCRIPT = [{"tool_calls": [{"name": "send", "arguments": {"q": "hello"}}]}, {"text": "sent"}]


class Stack:
    """One `python -m stepwise_local` process; `stop` (SIGTERM, a clean stop) or `kill` (SIGKILL)."""

    def __init__(self, state: Path | str, *, cwd: Path = ROOT, env: dict[str, str] | None = None) -> None:
        environ = {
            **os.environ,
            "PORT": str(free_port()),
            "STEPWISE_FOLLOW_PORT": str(free_port()),
            "STEPWISE_LOCAL_S3_PORT": str(free_port()),
            "STEPWISE_LOCAL_STATE": str(state),
            "STEPWISE_SCHEDULE_TICK_SECONDS": "1",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": str(ROOT),  # `tests` and the stack import from the repository wherever cwd is
            **(env or {}),
        }
        for name in (
            "STEPWISE_LOCAL_API_KEY",
            "STEPWISE_LOCAL_API_KEYS",
            "STEPWISE_MODEL",
            "STEPWISE_SQLITE_DIR",
        ):
            environ.pop(name, None)
        if state == "":
            environ.pop("STEPWISE_LOCAL_STATE")  # the default: .stepwise in the working directory
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stepwise_local"],
            cwd=cwd,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.lines: list[str] = []
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=self._read, args=(stdout,), daemon=True).start()

    def _read(self, stdout: Any) -> None:
        for line in stdout:  # one reader for the process's whole life keeps the pipe drained
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def ready(self) -> Stack:
        banner = eventually(
            lambda: self.output if "Ctrl-C" in self.output or self.proc.poll() is not None else None,
            timeout=90,
            interval=0.1,
            what="the banner (or the exit)",
        )
        assert READY in banner, banner
        found = re.search(r"base URL\s+(http://\S+)", banner)
        assert found, banner
        self.api = httpx.Client(
            base_url=found.group(1), headers={"Authorization": f"Bearer {KEY}"}, timeout=30
        )
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        # As long as the start's bound: under the full suite's load a clean shutdown passed 30 s once.
        return self.proc.wait(90)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)


@pytest.fixture
def started() -> Iterator[list[Stack]]:
    """Every stack a test starts, killed at the end whatever happened."""
    stacks: list[Stack] = []
    yield stacks
    for stack in stacks:
        if stack.proc.poll() is None:
            stack.kill()


def start(started: list[Stack], state: Path | str, **kwargs: Any) -> Stack:
    stack = Stack(state, **kwargs)
    started.append(stack)
    return stack.ready()


TERMINAL_EVENTS = ("run_completed", "run_failed", "run_cancelled")


def run_to_end(api: httpx.Client, run_id: str) -> dict[str, Any]:
    """The run once it ended and its terminal event is written (end_run writes it after the status)."""

    def ended() -> dict[str, Any] | None:
        run: dict[str, Any] = api.get(f"/v1/runs/{run_id}").json()
        if run["status"] in ("queued", "running", "waiting"):
            return None
        log = events(api, run_id)
        return run if log and log[-1]["type"] in TERMINAL_EVENTS else None

    return eventually(ended, timeout=60, interval=0.2, what=f"run {run_id} and its terminal event")


def events(api: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.get(f"/v1/runs/{run_id}/events").json()["events"]
    return found


def tool_results(api: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    return [e["data"] for e in events(api, run_id) if e["type"] == "tool_result"]


def saved_items(state: Path, table: str) -> list[dict[str, Any]]:
    """What the last save on disk holds for `table` (the snapshot's own file, read as a user could)."""
    try:
        items: list[dict[str, Any]] = json.loads((state / "state.json").read_text())["tables"][table]
    except (FileNotFoundError, ValueError):
        return []
    return items


def test_a_restart_keeps_the_session_settings_files_and_schedules(
    tmp_path: Path, started: list[Stack]
) -> None:
    state = tmp_path / "state"
    exa = Receiver()
    exa.replies["/search"] = Reply(
        body={"results": [{"title": "t", "url": "https://example.com", "text": "x"}]}
    )
    env = {"EXA_BASE_URL": exa.url}
    tools = [{"name": "storage_write"}, {"name": "storage_read"}, {"name": "web_search"}]
    first_script = [
        {"tool_calls": [{"name": "storage_write", "arguments": {"path": "notes.txt", "content": "kept"}}]},
        {"text": "noted the first thing"},
    ]

    # Given a stack that ran a run in a session, stored a setting, a file, an upload and a schedule
    before = start(started, state, env=env)
    agent = before.api.post("/v1/agents", json={"name": "keeper", "tools": tools}).json()
    accepted = before.api.post(
        f"/v1/agents/{agent['agent_id']}/runs", json={"message": "remember this", "script": first_script}
    ).json()
    first = run_to_end(before.api, accepted["run_id"])
    assert first["status"] == "succeeded", first
    first_events = events(before.api, first["run_id"])
    assert before.api.put("/v1/settings/EXA_API_KEY", json={"value": "exa-kept-secret"}).status_code == 200
    data = b"name,total\nann,3\n"
    ticket = before.api.post(
        "/v1/uploads", json={"name": "t.csv", "content_type": "text/csv", "size": len(data)}
    )
    assert ticket.status_code == 201, ticket.text
    put = httpx.put(ticket.json()["url"], headers=ticket.json()["headers"], content=data)
    assert put.status_code == 200, put.text
    due = (datetime.now(UTC) + timedelta(seconds=5)).replace(microsecond=0)
    schedule = before.api.post(
        f"/v1/agents/{agent['agent_id']}/schedules",
        json={"expression": f"at({due:%Y-%m-%dT%H:%M:%S})", "message": "scheduled hello"},
    )
    assert schedule.status_code == 201, schedule.text

    # When it stops cleanly (SIGTERM) and starts again on the same directory, on other ports
    assert before.stop() == 0
    after = start(started, state, env=env)

    # Then the agent, the run, its events and the setting are there, and the demo agent was not doubled
    names = sorted(a["name"] for a in after.api.get("/v1/agents").json()["agents"])
    assert names == ["demo", "keeper"]
    assert after.api.get(f"/v1/runs/{first['run_id']}").json()["status"] == "succeeded"
    assert events(after.api, first["run_id"]) == first_events
    assert [s["key"] for s in after.api.get("/v1/settings").json()["settings"]] == ["EXA_API_KEY"]
    assert "failed (execution_lost)" not in after.output  # nothing was in flight

    # And the next run in the session continues it: the file written before, the setting decrypted
    second_script = [
        {
            "tool_calls": [
                {"name": "storage_read", "arguments": {"operation": "download", "path": "notes.txt"}}
            ]
        },
        {"tool_calls": [{"name": "web_search", "arguments": {"query": "restarts"}}]},
        {"text": "second answer"},
    ]
    again = after.api.post(
        f"/v1/agents/{agent['agent_id']}/runs",
        json={"message": "what did I say?", "session_id": accepted["session_id"], "script": second_script},
    ).json()
    second = run_to_end(after.api, again["run_id"])
    assert second["status"] == "succeeded", second
    session = after.api.get(f"/v1/sessions/{accepted['session_id']}").json()
    history = json.dumps(session["messages"])
    assert "remember this" in history and "noted the first thing" in history and "second answer" in history
    assert [r["run_id"] for r in session["runs"]] == [first["run_id"], second["run_id"]]
    read, searched = tool_results(after.api, second["run_id"])
    assert "kept" in json.dumps(read["output"]), read
    assert "error" not in searched or searched["error"] is None, searched
    assert exa.to("/search")[-1].headers["x-api-key"] == "exa-kept-secret"  # the KMS key came back too

    # And the upload made before the restart is still there to attach
    attached = after.api.post(
        f"/v1/agents/{agent['agent_id']}/runs",
        json={"message": "look", "attachments": [{"upload_id": ticket.json()["upload_id"]}]},
    )
    assert attached.status_code == 202, attached.text
    assert run_to_end(after.api, attached.json()["run_id"])["status"] == "succeeded"

    # And the schedule fires after the restart (once, as its fire time came once)
    def scheduled() -> list[dict[str, Any]]:
        page = after.api.get("/v1/runs", params={"agent_id": agent["agent_id"]}).json()["runs"]
        return [r for r in page if r["input"] == "scheduled hello"]

    assert len(eventually(scheduled, timeout=60, interval=0.5, what="the scheduled run")) == 1
    assert after.stop() == 0
    exa.close()


def test_a_run_waiting_on_an_approval_when_killed_fails_execution_lost_and_replays(
    tmp_path: Path, started: list[Stack]
) -> None:
    state = tmp_path / "state"
    receiver = Receiver()
    tool = {
        "type": "http",
        "name": "send",
        "description": "send",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        "endpoint": f"{receiver.url}/send",
        "permission": "ask",
    }

    # Given a run paused on an approval, saved to disk, when the stack is killed (kill -9)
    before = start(started, state)
    agent = before.api.post("/v1/agents", json={"name": "asker", "tools": [tool]}).json()
    run_id = before.api.post(
        f"/v1/agents/{agent['agent_id']}/runs", json={"message": "go", "script": ASK_SCRIPT}
    ).json()["run_id"]

    def requested() -> dict[str, Any] | None:
        found = [e["data"] for e in events(before.api, run_id) if e["type"] == "approval_requested"]
        return found[0] if found else None

    approval = eventually(requested, timeout=60, interval=0.2, what="the approval")
    # and a second message to the same session, queued behind it (double texting)
    session_id = before.api.get(f"/v1/runs/{run_id}").json()["session_id"]
    queued = before.api.post(
        f"/v1/agents/{agent['agent_id']}/runs",
        json={"message": "and then?", "session_id": session_id, "script": [{"text": "after the restart"}]},
    ).json()["run_id"]
    assert before.api.get(f"/v1/runs/{queued}").json()["status"] == "queued"

    def saved() -> bool:
        # Both runs, the approval and the session's queue are on disk before the kill. The queued run
        # is recorded before its session's queue names it: a save between the two writes holds a queued
        # run in no queue, which the restart rightly fails as lost; this test is about the other case.
        queues = [item.get("queue", {}).get("L", []) for item in saved_items(state, "SessionsTable")]
        in_queue = any({"S": queued} in queue for queue in queues)
        return (
            len(saved_items(state, "RunsTable")) == 2
            and bool(saved_items(state, "InteractionsTable"))
            and in_queue
        )

    eventually(saved, interval=0.1, what="both runs, the approval and the queue on disk")
    before.kill()

    # When the stack starts again on that directory
    after = start(started, state)

    # Then the run failed with execution_lost, saying why, through the one ending (its terminal event)
    assert "1 run(s) in flight when it last stopped failed (execution_lost)" in after.output
    run = after.api.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "failed" and run["error"]["code"] == "execution_lost", run
    assert "local stack restarted" in run["error"]["message"]
    terminal = events(after.api, run_id)[-1]
    assert terminal["type"] == "run_failed" and terminal["data"]["error"]["code"] == "execution_lost"

    # And the run queued behind it was not failed: it started once the session was free, as it would have
    assert run_to_end(after.api, queued)["output"] == "after the restart"

    # And its approval link is gone (410), and approving through the API changes nothing
    link = urlparse(approval["approval_url"]).path
    assert after.api.get(link).status_code == 410
    assert after.api.post(f"/v1/runs/{run_id}/approve", json={"approved": True}).status_code in (409, 410)

    # And it may be replayed (it executed no tool): the replay runs and asks again, nothing was sent
    replay = after.api.post(f"/v1/runs/{run_id}/replay")
    assert replay.status_code in (201, 202), replay.text
    replay_id = replay.json()["run_id"]
    assert after.api.get(f"/v1/runs/{replay_id}").json()["replay_of"] == run_id
    eventually(
        lambda: [e for e in events(after.api, replay_id) if e["type"] == "approval_requested"],
        timeout=60,
        interval=0.2,
        what="the replay to ask again",
    )
    assert receiver.to("/send") == []
    after.stop()
    receiver.close()


def test_memory_state_writes_nothing_and_the_default_is_dot_stepwise(
    tmp_path: Path, started: list[Stack]
) -> None:
    # Given the stack run with STEPWISE_LOCAL_STATE=memory, in an empty directory
    memory_cwd = tmp_path / "memory"
    memory_cwd.mkdir()
    stack = start(started, "memory", cwd=memory_cwd)
    assert stack.api.post("/v1/agents", json={"name": "fleeting"}).status_code == 201
    assert "Everything lives in memory" in stack.output
    assert stack.stop() == 0

    # Then nothing was written anywhere in it
    assert list(memory_cwd.iterdir()) == []

    # And without the variable the state goes to .stepwise in the working directory
    default_cwd = tmp_path / "default"
    default_cwd.mkdir()
    stack = start(started, "", cwd=default_cwd)
    assert stack.stop() == 0
    assert (default_cwd / ".stepwise" / "state.json").is_file()


def test_an_unreadable_snapshot_is_refused_with_a_clear_message_and_kept(
    tmp_path: Path, started: list[Stack]
) -> None:
    # Given a state directory whose snapshot is not one
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text('{"format": "stepwise-local-state", "version": 1, "tables": ')

    # When the stack starts on it
    stack = Stack(state)
    started.append(stack)
    code = stack.proc.wait(90)

    # Then it refuses, says what to do, and leaves the file as it was
    assert code == 2, stack.output
    assert f"the local stack's state in {state} cannot be read" in stack.output
    assert "rm -rf" in stack.output and "STEPWISE_LOCAL_STATE=memory" in stack.output
    assert READY not in stack.output
    assert (state / "state.json").read_text().endswith('"tables": ')

"""`make run` beside another process that holds its ports: PORT + 1 (the follow WebSocket API) or
PORT + 2 (the uploads' S3 endpoint) taken falls back to a free port and says so; a port the developer
named that is taken stops with one line naming its variable, never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from stepwise_local.__main__ import BusyPort, is_free, side_port

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def held() -> Iterator[int]:
    """A loopback port another process would hold: bound and listening for the block's life."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_taken_default_falls_back_to_a_port_the_system_picks_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("STEPWISE_FOLLOW_PORT", raising=False)
    with held() as port:
        assert not is_free(port)
        assert side_port("STEPWISE_FOLLOW_PORT", port, "the follow WebSocket API") == 0

    assert capsys.readouterr().out == (
        f"port {port} is in use: the follow WebSocket API takes a free port instead "
        "(STEPWISE_FOLLOW_PORT chooses one)\n"
    )


def test_a_free_default_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_LOCAL_S3_PORT", raising=False)
    with held() as port:
        pass  # released: free again
    assert side_port("STEPWISE_LOCAL_S3_PORT", port, "the uploads' S3 endpoint") == port


def test_a_taken_port_the_developer_named_is_refused_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with held() as port:
        monkeypatch.setenv("STEPWISE_FOLLOW_PORT", str(port))
        with pytest.raises(BusyPort, match=f"port {port} \\(STEPWISE_FOLLOW_PORT\\) is in use"):
            side_port("STEPWISE_FOLLOW_PORT", port + 1, "the follow WebSocket API")


def test_make_run_with_a_taken_follow_port_stops_with_one_line() -> None:
    """The process as `make run` starts it: exit 2, one line on stderr, no traceback, nothing started."""
    with held() as taken:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": os.pathsep.join(str(ROOT / d) for d in ("shared", "dev")),
            "PORT": "0",
            "STEPWISE_FOLLOW_PORT": str(taken),
            "STEPWISE_LOCAL_STATE": "memory",
        }
        done = subprocess.run(
            [sys.executable, "-m", "stepwise_local"], env=env, capture_output=True, text=True, timeout=60
        )

    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: port {taken} (STEPWISE_FOLLOW_PORT) is in use by another process; "
        "set STEPWISE_FOLLOW_PORT to a free one"
    ]

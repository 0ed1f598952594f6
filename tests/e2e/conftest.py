"""The local stack as a developer runs it (`python -m stepwise_local`), started once for the e2e tests."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.e2e.support import KEY, OTHER_KEY, READY, free_port
from tests.eventually import eventually
from tests.fakes.receiver import Receiver

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Without these Chromium reaches for Google's services on a machine with no route to them.
CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="session")
def local_stack() -> Iterator[tuple[str, str]]:
    port = free_port()
    # PORT + 1 is held here, as by a second stack side by side: the follow WebSocket API falls back to a
    # free port (and says so), which the CLI's follow tests then use through POST /v1/runs/{id}/follow.
    follow_holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        follow_holder.bind(("127.0.0.1", port + 1))
        follow_holder.listen()
    except OSError:
        pass  # another process holds it already: taken either way
    env = {
        **os.environ,
        "PORT": str(port),
        "STEPWISE_LOCAL_S3_PORT": str(free_port()),  # not PORT + 2, which another process may hold
        "STEPWISE_LOCAL_API_KEYS": f"{OTHER_KEY}:other",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONUNBUFFERED": "1",
        "STEPWISE_LOCAL_STATE": "memory",  # the e2e stack remembers nothing, and writes nothing here
    }
    # The tests know the stack's configuration: nothing a developer's shell sets may change it.
    for name in ("STEPWISE_LOCAL_API_KEY", "STEPWISE_MODEL", "SLACK_SIGNING_SECRET", "STEPWISE_FOLLOW_PORT"):
        env.pop(name, None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stepwise_local"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert proc.stdout is not None
    stdout = proc.stdout
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        for line in stdout:
            lines.append(line)
            if READY in line:
                ready.set()
        ready.set()  # EOF: the process died; the check below reports it

    # One reader for the whole life of the process: it waits for the banner, then keeps the pipe drained.
    threading.Thread(target=read, daemon=True, name="local-stack-stdout").start()
    try:
        ready.wait(60)
        if not any(READY in line for line in lines):
            pytest.fail(f"local stack not ready (exit code {proc.poll()}):\n{''.join(lines)}")
        # the banner is printed in one write; give the rest of it a moment to arrive
        banner = eventually(
            lambda: "".join(lines) if "demo agent" in "".join(lines) else None,
            timeout=10,
            interval=0.1,
            what="the rest of the banner",
        )
        base = re.search(r"base URL\s+(http://\S+)", banner)
        demo = re.search(r"demo agent\s+(agt_\S+)", banner)
        assert base and demo, banner
        follow = re.search(r"follow\s+ws://127\.0\.0\.1:(\d+)/", banner)
        assert follow and int(follow.group(1)) != port + 1, banner
        assert f"port {port + 1} is in use: the follow WebSocket API takes a free port instead" in banner
        yield base.group(1), demo.group(1)
    finally:
        follow_holder.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.fixture(scope="session")
def base_url(local_stack: tuple[str, str]) -> str:
    return local_stack[0]


@pytest.fixture(scope="session")
def demo_agent_id(local_stack: tuple[str, str]) -> str:
    return local_stack[1]


@pytest.fixture
def api(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as client:
        yield client


@pytest.fixture
def other(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {OTHER_KEY}"}, timeout=30
    ) as client:
        yield client


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    fake = Receiver()
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium, Debian's package (no browser download at test time), for the pages and the
    console. Per module, never per session: Playwright's sync API keeps an asyncio loop running in the
    main thread while it is open, and every later test that runs a loop of its own (the MCP client, the
    async SDK) would fail with "Cannot run the event loop while another loop is running"."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield launched
        launched.close()

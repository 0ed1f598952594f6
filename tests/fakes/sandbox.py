"""A code sandbox on loopback that really runs the code: code_execute's sandbox contract
(`POST /execute {language, code, timeout_seconds}` → `{stdout, stderr, exit_code, duration_ms, timed_out}`)
over a subprocess with a time limit.

For tests only. It isolates nothing beyond a fresh working directory, an empty environment and its own
process group (killed whole at the time limit). A production sandbox must add what this does not: a
separate kernel or microVM per execution (Firecracker, gVisor), no network by default (or an egress
allowlist), CPU, memory, process and disk quotas, a read-only base image, and output caps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

INTERPRETERS = {"python": ([sys.executable, "-I"], "main.py"), "javascript": (["node"], "main.js")}


class FakeSandbox:
    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        sandbox = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                with sandbox._lock:
                    sandbox.requests.append({"path": self.path, "body": body})
                if sandbox.api_key and self.headers.get("Authorization") != f"Bearer {sandbox.api_key}":
                    return self._send(401, {"error": "bad key"})
                if self.path.rstrip("/") != "/execute" or body.get("language") not in INTERPRETERS:
                    return self._send(400, {"error": "unsupported request"})
                self._send(200, execute(body["language"], body["code"], float(body["timeout_seconds"])))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="sandbox")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def execute(language: str, code: str, timeout: float) -> dict[str, Any]:
    command, filename = INTERPRETERS[language]
    with tempfile.TemporaryDirectory(prefix="sandbox-") as workdir:
        path = os.path.join(workdir, filename)
        with open(path, "w", encoding="utf-8") as file:
            file.write(code)
        started = time.monotonic()
        process = subprocess.Popen(
            [*command, path],
            cwd=workdir,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},  # nothing of the test process
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        timed_out = False
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
    return {
        "stdout": out.decode(errors="replace"),
        "stderr": err.decode(errors="replace"),
        "exit_code": process.returncode,
        "duration_ms": int((time.monotonic() - started) * 1000),
        "timed_out": timed_out,
    }

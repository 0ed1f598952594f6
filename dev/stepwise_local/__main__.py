"""`make run`: the whole stack in one process on 127.0.0.1:$PORT (default 3000)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stepwise_local.stack import LocalStack

READY_LINE = "Stepwise local stack is ready"


def main() -> int:
    started = time.monotonic()
    port = int(os.environ.get("PORT", "3000"))
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    # Metrics are EMF documents printed to stdout (one per handler call): they would bury the console.
    # Traces go out only when OTEL_EXPORTER_OTLP_ENDPOINT names a collector (e.g. a local Jaeger).
    os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    # The demo tool and any tool a developer serves on this machine live on loopback, which the SSRF
    # guard blocks; locally (and only here, unless the developer says otherwise) loopback is allowed.
    os.environ.setdefault("STEPWISE_ALLOW_HOSTS", "127.0.0.1,localhost")
    # database_query/database_write open SQLite files only under <dir>/<tenant>/ (sqlite:///shop.db is
    # .stepwise/sqlite/local/shop.db for the local tenant); in AWS, without the variable, SQLite is refused.
    from stepwise_local.state import StateError, state_dir

    state = state_dir()  # $STEPWISE_LOCAL_STATE, .stepwise by default; None for `memory`
    if state is not None:
        os.environ.setdefault("STEPWISE_SQLITE_DIR", str(state / "sqlite"))

    # The follow WebSocket API listens on its own port, next to the HTTP API's unless told otherwise.
    # Presigned upload URLs go to the loopback S3 endpoint, next to them too.
    # Ports first, before anything heavy is imported: a busy one is one line, never a traceback.
    try:
        follow_port = side_port(FOLLOW_PORT_ENV, port + 1, "the follow WebSocket API")
        os.environ[S3_PORT_ENV] = str(side_port(S3_PORT_ENV, port + 2, "the uploads' S3 endpoint"))
        if not is_free(port):
            raise BusyPort(f"error: port {port} is in use by another process; set PORT to a free one")
    except BusyPort as exc:
        print(exc, file=sys.stderr)
        return 2

    from stepwise_local.demo import seed_demo_agent, serve_demo_tools
    from stepwise_local.gateway import serve
    from stepwise_local.stack import LocalStack

    try:
        stack = LocalStack.start(follow_port=follow_port, state_dir=state)
    except StateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server = serve(stack.gateway, "127.0.0.1", port)
    bound = server.server_address[1]
    base = f"http://127.0.0.1:{bound}"
    os.environ["STEPWISE_PUBLIC_URL"] = base  # approval links in events, mails and Slack messages
    key = next(iter(stack.api_keys))
    tools = serve_demo_tools()
    try:
        agent_id = seed_demo_agent(stack, key, f"http://127.0.0.1:{tools.server_address[1]}")
    except RuntimeError as exc:
        print(f"could not seed the demo agent: {exc}", file=sys.stderr)
        server.shutdown()
        stack.stop()
        return 1
    print(
        f"""
{READY_LINE} in {time.monotonic() - started:.1f}s
  base URL   {base}
  API key    {key}   (tenant {stack.api_keys[key]})
  docs       {base}/v1/docs   (spec: {base}/v1/openapi.json; both need the key)
  console    {base}/v1/console   (a web page: it asks for the key)
  follow     {stack.sockets.url if stack.sockets else "-"}   (WebSocket API: POST /v1/runs/<run_id>/follow)
  uploads    {os.environ.get("STEPWISE_LOCAL_S3_URL", "-")}   (S3 of the URLs POST /v1/uploads signs)
  demo agent {agent_id}   (tool get_weather)
  model      {os.environ.get("STEPWISE_MODEL") or "scripted"}
  schedules  {_ticking(stack.scheduler.interval)}

Try:
  curl -s -X POST {base}/v1/agents/{agent_id}/runs \\
    -H 'Authorization: Bearer {key}' -H 'Content-Type: application/json' \\
    -d '{{"message": "What is the weather in Paris?"}}'
  curl -s '{base}/v1/runs/<run_id>/events?wait=10' -H 'Authorization: Bearer {key}'

{_remembering(stack)}
Ctrl-C to stop.
""",
        flush=True,
    )
    from stepwise.llm.client import warm

    # The model step imports litellm on first use; do it now so the first run is not seconds slower.
    threading.Thread(target=warm, daemon=True, name="warm-litellm").start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.shutdown()
    tools.shutdown()
    stack.stop()
    return 0


FOLLOW_PORT_ENV = "STEPWISE_FOLLOW_PORT"
S3_PORT_ENV = "STEPWISE_LOCAL_S3_PORT"


class BusyPort(Exception):
    """A port the developer chose is taken: one line that says which variable to change."""


def is_free(port: int) -> bool:
    """Whether 127.0.0.1:`port` can be bound now (0 always can: the system picks one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def side_port(variable: str, default: int, what: str) -> int:
    """The port for a listener beside the HTTP API's: the one `variable` names, which must be free (a
    developer who chose it wants it), else `default` (PORT + 1 or + 2) when free, else 0: the system
    picks a free one, the banner shows it, and a line here says why. Two stacks side by side (PORT and
    PORT + 1) therefore both start."""
    chosen = os.environ.get(variable)
    if chosen:
        if not is_free(int(chosen)):
            taken = f"error: port {chosen} ({variable}) is in use by another process"
            raise BusyPort(f"{taken}; set {variable} to a free one")
        return int(chosen)
    if is_free(default):
        return default
    print(f"port {default} is in use: {what} takes a free port instead ({variable} chooses one)", flush=True)
    return 0


def _remembering(stack: LocalStack) -> str:
    if stack.state is None:
        return "Everything lives in memory (moto) and is gone when this stops (STEPWISE_LOCAL_STATE=memory)."
    where = stack.state.directory.path
    lost = [o for o in stack.lost if o.action == "reconciled"]
    failed = f"\n  {len(lost)} run(s) in flight when it last stopped failed (execution_lost)." if lost else ""
    return (
        f"State is kept in {where} across restarts (rm -rf {where} to start empty; "
        f"STEPWISE_LOCAL_STATE=memory keeps nothing).{failed}"
    )


def _ticking(interval: float) -> str:
    if interval <= 0:
        return "not fired (STEPWISE_SCHEDULE_TICK_SECONDS=0)"
    return f"due ones fire every {interval:g}s, like EventBridge Scheduler (STEPWISE_SCHEDULE_TICK_SECONDS)"


if __name__ == "__main__":
    sys.exit(main())

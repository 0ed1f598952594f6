"""What the benchmarks share: figures, the local stack with one loopback tool, runs driven to their
end, execution histories. (Per-step and per-call fits: bench/fitting.py; metering: bench/meter.py.)"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POLL_INTERVAL = 0.02  # seconds between GET /v1/runs/{id} polls; short next to a ~100 ms step
RUN_DEADLINE = 300.0  # seconds a run may take before the benchmark gives up on it
TOOL_NAME = "lookup"

# Runs that vary model steps and tool calls independently, as tool calls per tool-using step; every run
# ends with one text turn. A step without tool calls is always the last one (the loop finalizes on a
# text answer), so a run of n steps has n-1 tool-using steps and "5 steps, 0 tools" cannot exist.
RUN_SHAPES: dict[str, list[int]] = {
    "1 step, text only": [],
    "5 steps, 4 calls (1+1+1+1)": [1, 1, 1, 1],
    "2 steps, 4 calls (4)": [4],
    "3 steps, 4 calls (1+3)": [1, 3],
    "4 steps, 4 calls (2+1+1)": [2, 1, 1],
    "5 steps, 8 calls (3+2+1+2)": [3, 2, 1, 2],
}
CANONICAL = "5 steps, 4 calls (1+1+1+1)"  # DESIGN.md's canonical run, less its approval


# --- Figures -------------------------------------------------------------------------------------


@dataclass
class Figure:
    name: str
    value: float | int | str | None
    unit: str = ""
    note: str = ""
    digits: int = 1

    def shown(self) -> str:
        if isinstance(self.value, float):
            return f"{self.value:,.{self.digits}f}"
        if isinstance(self.value, int) and not isinstance(self.value, bool):
            return f"{self.value:,}"
        return "n/a" if self.value is None else str(self.value)


@dataclass
class Section:
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, name: str, value: Any, unit: str = "", note: str = "", digits: int = 1) -> None:
        self.figures.append(Figure(name, value, unit, note, digits))


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


# --- A loopback tool -----------------------------------------------------------------------------


class ToolServer:
    """The `lookup` tool's endpoint: answers every POST with a small JSON document, counts them and
    notes when each arrived (time.perf_counter(), taken before the body is read)."""

    def __init__(self) -> None:
        self.requests = 0
        self.arrivals: list[float] = []
        counter_lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                arrived = time.perf_counter()
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    args = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    args = {}
                with counter_lock:
                    owner.requests += 1
                    owner.arrivals.append(arrived)
                body = json.dumps({"q": args.get("q"), "answer": f"result for {args.get('q')}"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/lookup"
        threading.Thread(target=self.server.serve_forever, daemon=True, name="bench-tool").start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def lookup_tool(endpoint: str) -> dict[str, Any]:
    return {
        "type": "http",
        "name": TOOL_NAME,
        "description": "Look an item up.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        "endpoint": endpoint,
        "read_only": True,
    }


def script_for(calls_per_step: Sequence[int], tag: str, tool: str = TOOL_NAME) -> list[dict[str, Any]]:
    """One tool-call turn per entry (each call with distinct arguments), then a final text turn."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": tool, "arguments": {"q": f"{tag}-{s}-{j}"}} for j in range(n)]}
        for s, n in enumerate(calls_per_step)
    ]
    return [*turns, {"text": f"done ({tag})"}]


# --- The local stack -----------------------------------------------------------------------------


@dataclass
class RunResult:
    run_id: str
    status: str
    steps: int
    tool_calls: int
    client_seconds: float  # POST … until GET /v1/runs/{id} first shows a terminal status
    server_seconds: float  # the run record's created_at → finished_at
    invocations: dict[str, int]  # per state-machine function, during this run
    tool_requests: int
    error: Any = None

    @property
    def ms_per_step(self) -> float:
        return self.server_seconds * 1000 / max(self.steps, 1)


class Local:
    """template.yaml in moto, the loopback tool, and one agent holding it: started once per process."""

    def __init__(self) -> None:
        # The SSRF guard blocks loopback unless told otherwise; the stack reads this at start.
        os.environ["STEPWISE_ALLOW_HOSTS"] = "127.0.0.1,localhost"
        os.environ["POWERTOOLS_LOG_LEVEL"] = "WARNING"
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
        from stepwise_local.stack import LocalStack

        started = time.perf_counter()
        self.stack = LocalStack.start()
        self.start_seconds = time.perf_counter() - started
        # template.yaml sets INFO for Lambda; handler modules read it when first imported, here.
        os.environ["POWERTOOLS_LOG_LEVEL"] = "WARNING"
        self.tool = ToolServer()
        self.agent_id = self.create_agent({"name": "bench", "tools": [lookup_tool(self.tool.url)]})
        self.machine_functions = _machine_functions(self.stack)
        self._runs = 0

    def create_agent(self, body: dict[str, Any]) -> str:
        status, _, agent = self.stack.invoke_api("POST", "/v1/agents", body)
        if status != 201:
            raise RuntimeError(f"could not create agent {body.get('name')!r}: {status} {agent}")
        return str(agent["agent_id"])

    def sfn(self) -> Any:
        import boto3

        return boto3.client("stepfunctions")

    def start(
        self, script: list[dict[str, Any]] | None, max_steps: int, *, agent_id: str | None = None
    ) -> str:
        """Start a run of the bench agent (or `agent_id`); without a script the agent's model answers."""
        body: dict[str, Any] = {"message": f"bench run {self._runs}", "max_steps": max_steps}
        if script is not None:
            body["script"] = script
        self._runs += 1
        path = f"/v1/agents/{agent_id or self.agent_id}/runs"
        status, _, accepted = self.stack.invoke_api("POST", path, body)
        if status != 202:
            raise RuntimeError(f"run not accepted: {status} {accepted}")
        return str(accepted["run_id"])

    def run(
        self,
        script: list[dict[str, Any]] | None,
        max_steps: int | None = None,
        *,
        agent_id: str | None = None,
        poll: float = POLL_INTERVAL,
    ) -> RunResult:
        """Start a run and wait until both its record and its execution have finished (polling the run
        every `poll` seconds: the client shares the process with the stack, so its polls take CPU from
        the steps)."""
        calls = sum(len(t.get("tool_calls") or []) for t in script or [])
        before, tool_before = dict(self.stack.lambdas.invocations), self.tool.requests
        began = time.perf_counter()
        run_id = self.start(script, max_steps or max(len(script or []), 1), agent_id=agent_id)
        view = self.wait_run(run_id, poll)
        client = time.perf_counter() - began
        self.wait_execution(run_id)
        after = self.stack.lambdas.invocations
        return RunResult(
            run_id=run_id,
            status=view["status"],
            steps=int(view["steps"]),
            tool_calls=calls,
            client_seconds=client,
            server_seconds=_seconds(view["created_at"], view["finished_at"]),
            invocations={f: after[f] - before.get(f, 0) for f in self.machine_functions},
            tool_requests=self.tool.requests - tool_before,
            error=view.get("error"),
        )

    def wait_run(self, run_id: str, poll: float = POLL_INTERVAL) -> dict[str, Any]:
        """Poll GET /v1/runs/{id} until the run is terminal; returns its view."""
        deadline = time.monotonic() + RUN_DEADLINE
        while True:
            status, _, view = self.stack.invoke_api("GET", f"/v1/runs/{run_id}")
            if status == 200 and view["finished_at"] is not None:
                return dict(view)
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} still {view.get('status')} after {RUN_DEADLINE}s")
            time.sleep(poll)

    def wait_status(self, run_id: str, wanted: str) -> dict[str, Any]:
        """Poll GET /v1/runs/{id} until the run's status is `wanted` (an error if it ends first)."""
        deadline = time.monotonic() + RUN_DEADLINE
        while True:
            status, _, view = self.stack.invoke_api("GET", f"/v1/runs/{run_id}")
            if status == 200 and view["status"] == wanted:
                return dict(view)
            if status == 200 and view["finished_at"] is not None:
                raise RuntimeError(
                    f"run {run_id} ended {view['status']} before it was {wanted}: {view['error']}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} not {wanted} after {RUN_DEADLINE}s ({view.get('status')})")
            time.sleep(POLL_INTERVAL)

    def execution_arn(self, run_id: str) -> str:
        # The execution is named after the run (start.py), so its ARN follows from the machine's.
        return self.stack.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{run_id}"

    def wait_execution(self, run_id: str) -> str:
        deadline = time.monotonic() + RUN_DEADLINE
        sfn = self.sfn()
        while True:
            status = str(sfn.describe_execution(executionArn=self.execution_arn(run_id))["status"])
            if status != "RUNNING":
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"execution of {run_id} still RUNNING after {RUN_DEADLINE}s")
            time.sleep(POLL_INTERVAL)

    def history(self, run_id: str) -> list[dict[str, Any]]:
        sfn, events, token = self.sfn(), [], None
        while True:
            page = sfn.get_execution_history(
                executionArn=self.execution_arn(run_id),
                maxResults=1000,
                **({"nextToken": token} if token else {}),
            )
            events += page["events"]
            token = page.get("nextToken")
            if not token:
                return events

    def execution_names(self) -> dict[str, str]:
        """execution name → ARN, as list_executions reports them."""
        sfn, found, token = self.sfn(), {}, None
        while True:
            page = sfn.list_executions(
                stateMachineArn=self.stack.state_machine_arn,
                maxResults=1000,
                **({"nextToken": token} if token else {}),
            )
            found.update({e["name"]: e["executionArn"] for e in page["executions"]})
            token = page.get("nextToken")
            if not token:
                return found

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """Every event of a finished run through GET /v1/runs/{id}/events, paged with after/next until
        the page says done (the run is over and its last event has been read)."""
        out: list[dict[str, Any]] = []
        after = 0
        deadline = time.monotonic() + RUN_DEADLINE
        while True:
            status, _, page = self.stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after={after}&wait=1")
            if status != 200:
                raise RuntimeError(f"events of {run_id}: {status} {page}")
            out += page["events"]
            after = page["next"]
            if page["done"]:
                return out
            if time.monotonic() > deadline:
                raise TimeoutError(f"events of {run_id} not done after {RUN_DEADLINE}s ({len(out)} read)")

    def close(self) -> None:
        self.tool.close()
        self.stack.stop()


@contextmanager
def timed_invocations(env: Local) -> Iterator[list[tuple[str, float]]]:
    """(function, wall seconds) of every Lambda invocation the state machine makes while installed.

    Wraps the LocalLambdas instance's `invoke`, which the moto seam looks up on each call (the API
    gateway holds its own reference, so API requests are not timed). Nests inside other wrappers of it
    (dynamodb_ops.Recorder) and restores whatever was there before."""
    lambdas = env.stack.lambdas
    previous = lambdas.__dict__.get("invoke")
    inner = lambdas.invoke
    timings: list[tuple[str, float]] = []
    lock = threading.Lock()

    def invoke(name_or_arn: str, event: Any) -> Any:
        began = time.perf_counter()
        try:
            return inner(name_or_arn, event)
        finally:
            with lock:
                timings.append((lambdas.logical_id(name_or_arn), time.perf_counter() - began))

    lambdas.invoke = invoke  # type: ignore[method-assign]
    try:
        yield timings
    finally:
        if previous is None:
            del lambdas.invoke
        else:
            lambdas.invoke = previous  # type: ignore[method-assign]


_local: Local | None = None


def local() -> Local:
    """The process's one local stack (moto is process-global), started on first use."""
    global _local
    if _local is None:
        _local = Local()
    return _local


def close_local() -> None:
    global _local
    if _local is not None:
        _local.close()
        _local = None


def _machine_functions(stack: Any) -> list[str]:
    """The functions the state machine invokes, read from its DefinitionSubstitutions in the template."""
    from stepwise_local.cfn_yaml import load_template
    from stepwise_local.stack import TEMPLATE

    names: list[str] = []
    for res in load_template(TEMPLATE)["Resources"].values():
        if res["Type"] != "AWS::Serverless::StateMachine":
            continue
        for value in (res["Properties"].get("DefinitionSubstitutions") or {}).values():
            # !GetAtt Fn.Arn, or !Ref Fn.Alias (an AutoPublishAlias): either names the function.
            target = (value.get("Fn::GetAtt") or value.get("Ref")) if isinstance(value, dict) else None
            if target:
                names.append(str(target[0] if isinstance(target, list) else target.split(".")[0]))
    return [n for n in dict.fromkeys(names) if n in stack.lambdas.invocations]


def _seconds(start: str, end: str) -> float:
    return (_when(end) - _when(start)).total_seconds()


def _when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))

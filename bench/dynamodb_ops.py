"""DynamoDB requests per model step and per tool call, by function and operation.

Every DynamoDB request (pynamodb's and boto3's alike) goes through botocore's
`BaseClient._make_api_call`, which is wrapped for the duration of the benchmark; each request is charged
to the Lambda function running on that thread (the local Lambda seam is wrapped to say which), or to
the API when the run is started. Runs are awaited on the execution (describe_execution), not by polling
the API, so no reads of the waiting client are counted.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bench.harness import CANONICAL, RUN_SHAPES, Local, Section, add_fit, local, script_for

READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
START = "API (POST …/runs)"  # requests made while the run is being started, authorizer included


@dataclass(frozen=True)
class Request:
    function: str
    operation: str
    items: int  # items written (batch/transaction size) or returned (Query, GetItem)


class Recorder:
    """Counts DynamoDB requests per function while installed."""

    def __init__(self, env: Local) -> None:
        self.env = env
        self.requests: list[Request] = []
        self._where = threading.local()
        self._lock = threading.Lock()

    def label(self) -> str:
        return getattr(self._where, "function", "") or "unattributed"

    @contextmanager
    def charging(self, function: str) -> Iterator[None]:
        previous = getattr(self._where, "function", "")
        self._where.function = function
        try:
            yield
        finally:
            self._where.function = previous

    @contextmanager
    def installed(self) -> Iterator[None]:
        from botocore.client import BaseClient

        original_call = BaseClient._make_api_call
        lambdas = self.env.stack.lambdas
        recorder = self

        def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            result = original_call(client, operation, params)
            if client.meta.service_model.service_name == "dynamodb":
                with recorder._lock:
                    recorder.requests.append(
                        Request(recorder.label(), operation, _items(operation, params, result))
                    )
            return result

        original_invoke: Callable[[str, Any], Any] = lambdas.invoke

        def invoke(name_or_arn: str, event: Any) -> Any:
            with recorder.charging(lambdas.logical_id(name_or_arn)):
                return original_invoke(name_or_arn, event)

        BaseClient._make_api_call = make_api_call
        lambdas.invoke = invoke  # type: ignore[method-assign]  # the moto seam looks it up on each call
        try:
            yield
        finally:
            BaseClient._make_api_call = original_call
            del lambdas.invoke


def _items(operation: str, params: dict[str, Any], result: Any) -> int:
    if operation == "BatchWriteItem":
        return sum(len(v) for v in params.get("RequestItems", {}).values())
    if operation == "TransactWriteItems":
        return len(params.get("TransactItems", []))
    if operation in ("Query", "Scan"):
        return len(result.get("Items", []))
    if operation == "GetItem":
        return 1 if result.get("Item") else 0
    return 1


def _split(requests: list[Request]) -> dict[str, int]:
    ops = Counter(r.operation for r in requests)
    return {
        "reads": sum(n for op, n in ops.items() if op in READS),
        "writes": sum(n for op, n in ops.items() if op in WRITES),
        "items_written": sum(r.items for r in requests if r.operation in WRITES),
        "items_read": sum(r.items for r in requests if r.operation in READS),
    }


def run() -> Section:
    section = Section("DynamoDB requests (moto, counted at botocore)")
    env = local()
    recorder = Recorder(env)
    runs: list[dict[str, Any]] = []
    with recorder.installed():
        for i, (label, calls) in enumerate(RUN_SHAPES.items()):
            script = script_for(calls, f"ddb-{i}")
            mark = len(recorder.requests)
            with recorder.charging(START):
                run_id = env.start(script, len(script))
            env.wait_execution(run_id)
            during = recorder.requests[mark:]
            view = env.stack.invoke_api("GET", f"/v1/runs/{run_id}")[2]
            runs.append(
                {
                    "shape": label,
                    "run_id": run_id,
                    "status": view["status"],
                    "steps": int(view["steps"]),
                    "tool_calls": sum(calls),
                    **_split(during),
                    "by_function": {
                        f: dict(Counter(r.operation for r in during if r.function == f))
                        for f in dict.fromkeys(r.function for r in during)
                    },
                }
            )
    failed = [f"{r['shape']}: {r['status']}" for r in runs if r["status"] != "succeeded"]
    if failed:
        section.notes.append(
            "RUNS THAT DID NOT SUCCEED (fits use the runs that succeeded): " + "; ".join(failed)
        )
    stray = [r for r in runs if "unattributed" in r["by_function"]]
    if stray:
        section.notes.append(
            f"{len(stray)} runs had requests on threads outside any function (counted anyway)"
        )

    fits = {key: add_fit(section, runs, key, "requests") for key in ("reads", "writes")}
    section.notes.append(f"fixed per run includes starting the run: {START}")
    canon = next(r for r in runs if r["shape"] == CANONICAL)
    section.add(
        f"canonical run ({CANONICAL})",
        canon["reads"] + canon["writes"],
        "requests",
        f"{canon['reads']} reads, {canon['writes']} writes ({canon['items_written']} items written); "
        f"{canon['items_read']} items returned by reads",
    )
    for function, ops in canon["by_function"].items():
        section.notes.append(
            f"canonical run, {function}: " + ", ".join(f"{op} ×{n}" for op, n in sorted(ops.items()))
        )
    width = max(len(r["shape"]) for r in runs)
    for r in runs:
        section.notes.append(
            f"{r['shape']:<{width}}  {r['reads']:>3} reads  {r['writes']:>3} writes  "
            f"{r['items_written']:>3} items written  {r['items_read']:>4} items read"
        )
    section.notes.append(
        "items read grow faster than steps: each model step reads the session's whole history (Query)."
    )
    section.details = {"runs": runs, "fits": {k: f.as_dict() for k, f in fits.items() if f}}
    return section

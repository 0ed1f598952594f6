"""Metering the local stack: every DynamoDB request with its read and write units, every Lambda
invocation with its wall time and caller, every model call and which invocation made it.

DynamoDB: every botocore client's API call, boto3's (stepwise.core.aws), pynamodb's (its own botocore
session per Connection) and Powertools' alike, goes through `botocore.client.BaseClient._make_api_call`,
so wrapping it on the class meters clients that already exist and any made later, on any session,
without a hook per client. A request is recorded whatever its outcome: ConditionalCheckFailed,
TransactionCanceled and any other error included, with botocore's retry count. Units follow
bench/capacity.py from what the request really touched:
- writes: the item before and after, read from moto's backend directly (no request) around the write,
  under one lock so no other write lands in between;
- a Query or Scan with a filter or projection: the items it examined, by repeating it unfiltered and
  unprojected through the unwrapped call (not counted), as DynamoDB bills what it reads, not returns;
- a GetItem with a projection: the whole item, from moto's backend.

Lambda: the local seam (LocalLambdas.invoke, looked up on each call) and the gateway's reference to it
are wrapped, so an invocation from Step Functions, an async Event invocation and an API request are all
seen, each with the label that was current when it was made (`caller`), e.g. the bench's polling.

Every request and invocation is charged to the innermost function running on its thread, or to a
label the bench sets with `charging()` (the API request that started a run, the bench's own polling).
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from bench.capacity import (
    NARROWING,
    Table,
    examining,
    item_size,
    read_units,
    tables_from_template,
    write_cost,
)

READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
OUTSIDE = "no function"  # a request on a thread running no function: a Step Functions integration, or us


@dataclass(frozen=True)
class Request:
    function: str  # the function (or bench label) it was made in
    invocation: int  # the invocation it was made in (0: none)
    root: str  # the bench label current where it began (e.g. polling), through nested invocations
    operation: str
    tables: tuple[str, ...]
    outcome: str  # "ok", or the error code
    attempts: int  # HTTP attempts, botocore's retries included
    began: float  # time.time()
    ended: float = 0.0  # time.time() when its answer (or error) was back: round trips are read from these
    thread: int = 0  # threading.get_ident() of the thread that made it
    items_read: int = 0  # items examined (what reads are billed on)
    items_returned: int = 0
    items_written: int = 0
    write_bytes: int = 0  # Σ over the items written of the larger of their sizes before and after
    rru: float = 0.0
    wru_table: float = 0.0
    wru_index: float = 0.0
    index_wru: dict[str, float] = field(default_factory=dict)  # "Table/index" → WRU

    @property
    def failed(self) -> bool:
        return self.outcome != "ok"

    @property
    def wru(self) -> float:
        return self.wru_table + self.wru_index

    @property
    def items(self) -> int:
        return self.items_written if self.operation in WRITES else self.items_returned


@dataclass
class Invocation:
    id: int
    function: str
    caller: str  # the function or label it was invoked from ("" for Step Functions' own thread)
    root: str  # the bench label it descends from ("" when none)
    began: float  # time.perf_counter()
    ended: float = 0.0
    model_calls: int = 0
    model_spans: list[tuple[float, float]] = field(default_factory=list)  # time.time() of each model call
    thread: int = 0  # the thread it ran on (its own requests are on it; the rest on its workers)

    @property
    def seconds(self) -> float:
        return self.ended - self.began


class Recorder:
    """Meters DynamoDB requests and Lambda invocations while installed."""

    def __init__(self, env: Any) -> None:
        from stepwise_local.cfn_yaml import load_template
        from stepwise_local.stack import TEMPLATE

        self.env = env
        physical = env.stack.resolver.physical
        self.tables: dict[str, Table] = {
            physical.get(logical, logical): t
            for logical, t in tables_from_template(load_template(TEMPLATE)).items()
        }
        self.requests: list[Request] = []
        self.invocations: list[Invocation] = []
        self.errors: list[str] = []  # metering failures (the request itself went on)
        # Where this thread is, as a context variable: a worker running in a copy of a function's
        # context (the Step's tool calls, its concurrent requests) is charged to that function.
        self._where: ContextVar[tuple[str, Invocation | None, str]] = ContextVar(
            f"bench_meter_where_{id(self)}", default=("", None, "")
        )
        self._lock = threading.Lock()
        self._write_lock = threading.RLock()
        self._ids = itertools.count(1)
        self.model_latency = 0.0  # seconds a scripted model call is made to take (0: answers at once)
        # Seconds each DynamoDB request is made to wait before it is sent (0: none). moto answers in
        # process, holding the GIL, so two requests issued together rarely overlap in time; with a
        # network's latency they do, as they would in AWS, and round trips can be read from timing.
        self.request_latency = 0.0

    # --- where we are --------------------------------------------------------------------------

    def label(self) -> str:
        return self._where.get()[0] or OUTSIDE

    def _invocation(self) -> Invocation | None:
        return self._where.get()[1]

    def root(self) -> str:
        return self._where.get()[2]

    @contextmanager
    def charging(self, label: str) -> Iterator[None]:
        """Charge what this thread does (and the invocations it makes) to `label`."""
        with self._inside(label, None, root=label):
            yield

    @contextmanager
    def _inside(self, function: str, invocation: Invocation | None, *, root: str) -> Iterator[None]:
        token = self._where.set((function, invocation, root))
        try:
            yield
        finally:
            self._where.reset(token)

    # --- installing ----------------------------------------------------------------------------

    @contextmanager
    def installed(self) -> Iterator[None]:
        from botocore.client import BaseClient

        from stepwise.llm.scripted import ScriptedLLM

        lambdas, gateway = self.env.stack.lambdas, self.env.stack.gateway
        original_call = BaseClient._make_api_call
        previous = lambdas.__dict__.get("invoke")  # another wrapper's, when nested inside one
        original_invoke: Callable[[str, Any], Any] = lambdas.invoke
        gateway_invoke = gateway._invoke
        model = {name: getattr(ScriptedLLM, name) for name in ("completion", "streaming")}
        recorder = self

        def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            if client.meta.service_model.service_name != "dynamodb":
                return original_call(client, operation, params)
            return recorder._metered(original_call, client, operation, params)

        def invoking(inner: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
            def invoke(name_or_arn: str, event: Any) -> Any:
                function = lambdas.logical_id(name_or_arn)
                caller, root = recorder._where.get()[0], recorder.root()
                call = Invocation(next(recorder._ids), function, caller, root, time.perf_counter())
                call.thread = threading.get_ident()
                try:
                    with recorder._inside(function, call, root=root):
                        return inner(name_or_arn, event)
                finally:
                    call.ended = time.perf_counter()
                    with recorder._lock:
                        recorder.invocations.append(call)

            return invoke

        def counting(method: Callable[..., Any]) -> Callable[..., Any]:
            def call(handler: Any, *args: Any, **kwargs: Any) -> Any:
                current = recorder._invocation()
                if current is not None:
                    current.model_calls += 1
                answer = method(handler, *args, **kwargs)
                if recorder.model_latency:  # the bench's stand-in for a hosted model's time to answer
                    time.sleep(recorder.model_latency)
                return answer

            return call

        from stepwise.loop import model_call

        complete = model_call.complete

        def spanned(*args: Any, **kwargs: Any) -> Any:
            began = time.time()
            try:
                return complete(*args, **kwargs)
            finally:
                current = recorder._invocation()
                if current is not None:
                    current.model_spans.append((began, time.time()))

        model_call.complete = spanned  # type: ignore[assignment]
        BaseClient._make_api_call = make_api_call
        lambdas.invoke = invoking(original_invoke)  # the moto seam looks it up on each call
        gateway._invoke = invoking(gateway_invoke)
        for name, method in model.items():
            setattr(ScriptedLLM, name, counting(method))
        try:
            yield
        finally:
            BaseClient._make_api_call = original_call
            model_call.complete = complete  # type: ignore[assignment]
            if previous is None:
                del lambdas.invoke
            else:
                lambdas.invoke = previous
            gateway._invoke = gateway_invoke
            for name, method in model.items():
                setattr(ScriptedLLM, name, method)

    # --- one DynamoDB request ------------------------------------------------------------------

    def _metered(self, call: Callable[..., Any], client: Any, operation: str, params: dict[str, Any]) -> Any:
        from botocore.exceptions import ClientError

        began = time.time()
        where = (self.label(), self._invocation(), self.root())
        if self.request_latency:
            time.sleep(
                self.request_latency
            )  # outside the write lock: requests in flight together wait together
        guard = self._write_lock if operation in WRITES else nullcontext()
        with guard:
            before = self._before(client, operation, params) if operation in WRITES else []
            outcome, response = "ok", None
            try:
                response = call(client, operation, params)
                return response
            except ClientError as exc:
                response = exc.response
                outcome = str(response.get("Error", {}).get("Code") or type(exc).__name__)
                raise
            except Exception as exc:
                outcome = type(exc).__name__
                raise
            finally:
                ended = time.time()  # before the metering's own reads below
                try:
                    request = self._request(call, client, operation, params, outcome, response or {}, before)
                    request = _placed(request, where, began, response or {})
                    request = _with(request, ended=ended, thread=threading.get_ident())
                    with self._lock:
                        self.requests.append(request)
                except Exception:  # noqa: BLE001 - a metering bug must not change what the stack does
                    self.errors.append(f"{operation}: {traceback.format_exc(limit=3)}")

    def _request(
        self,
        call: Callable[..., Any],
        client: Any,
        operation: str,
        params: dict[str, Any],
        outcome: str,
        response: dict[str, Any],
        before: list[tuple[str, dict[str, Any], dict[str, Any] | None]],
    ) -> Request:
        ok = outcome == "ok"
        blank = Request("", 0, "", operation, _tables(operation, params), outcome, 1, 0.0)
        if operation in WRITES:
            return self._write(client, blank, before, ok, outcome)
        if operation not in READS or not ok:
            return blank  # a failed read, or a control-plane call: no units
        if operation == "GetItem":
            found = response.get("Item")
            if found and any(k in params for k in NARROWING):
                found = self._item(client, params["TableName"], params["Key"]) or found
            size = item_size(found)
            units = read_units(size, consistent=bool(params.get("ConsistentRead")))
            return _with(blank, items_read=int(bool(found)), items_returned=int(bool(found)), rru=units)
        if operation in ("Query", "Scan"):
            examined = response.get("Items") or []
            narrowed = any(k in params for k in NARROWING) or params.get("Select") == "COUNT"
            if narrowed:
                try:
                    examined = call(client, operation, examining(params)).get("Items") or []
                except Exception:  # noqa: BLE001 - fall back to what it returned, and say so
                    self.errors.append(f"{operation} re-run unfiltered: {traceback.format_exc(limit=2)}")
            size = sum(item_size(i) for i in examined)
            units = read_units(size, consistent=bool(params.get("ConsistentRead")))
            returned = int(response.get("Count", len(response.get("Items") or [])))
            return _with(blank, items_read=len(examined), items_returned=returned, rru=units)
        if operation == "BatchGetItem":
            rru, found = 0.0, 0
            for table, spec in (params.get("RequestItems") or {}).items():
                items = (response.get("Responses") or {}).get(table) or []
                found += len(items)
                consistent = bool(spec.get("ConsistentRead"))
                rru += sum(read_units(item_size(i), consistent=consistent) for i in items)
                rru += (len(spec.get("Keys") or []) - len(items)) * read_units(0, consistent=consistent)
            return _with(blank, items_read=found, items_returned=found, rru=rru)
        items = [r.get("Item") for r in response.get("Responses") or []]  # TransactGetItems
        rru = sum(read_units(item_size(i), consistent=True, transactional=True) for i in items)
        return _with(blank, items_read=sum(1 for i in items if i), items_returned=len(items), rru=rru)

    def _write(
        self,
        client: Any,
        blank: Request,
        before: list[tuple[str, dict[str, Any], dict[str, Any] | None]],
        ok: bool,
        outcome: str,
    ) -> Request:
        conditional = outcome in ("ConditionalCheckFailedException", "TransactionCanceledException")
        if not ok and not conditional:
            return blank  # rejected before it touched anything (validation, throttling): not billed
        transactional = blank.operation == "TransactWriteItems"
        table_wru, index_wru, size = 0.0, dict[str, float](), 0
        for table_name, key, old in before:
            table = self.tables.get(table_name) or Table(table_name, tuple(key))
            new = self._item(client, table_name, key) if ok else old
            size += max(item_size(old), item_size(new))
            cost = write_cost(table, old, new, succeeded=ok, transactional=transactional)
            table_wru += cost.table
            for index, units in cost.indexes.items():
                index_wru[f"{table_name}/{index}"] = index_wru.get(f"{table_name}/{index}", 0) + units
        return _with(
            blank,
            items_written=len(before) if ok else 0,
            write_bytes=size,
            wru_table=table_wru,
            wru_index=float(sum(index_wru.values())),
            index_wru=index_wru,
        )

    def _before(
        self, client: Any, operation: str, params: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        try:
            return self._images(client, operation, params)
        except Exception:  # noqa: BLE001 - unmetered rather than a request the stack never made
            self.errors.append(f"{operation} images: {traceback.format_exc(limit=2)}")
            return []

    def _images(
        self, client: Any, operation: str, params: dict[str, Any]
    ) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
        """(table, key, item before) for every item the write names."""
        targets: list[tuple[str, dict[str, Any]]] = []
        if operation in ("PutItem", "UpdateItem", "DeleteItem"):
            targets.append((params["TableName"], self._key(params["TableName"], params)))
        elif operation == "BatchWriteItem":
            for table, writes in (params.get("RequestItems") or {}).items():
                for w in writes:
                    spec = w.get("PutRequest") or w.get("DeleteRequest") or {}
                    targets.append((table, self._key(table, spec)))
        else:
            for action in params.get("TransactItems") or []:
                (spec,) = action.values()
                targets.append((spec["TableName"], self._key(spec["TableName"], spec)))
        return [(table, key, self._item(client, table, key)) for table, key in targets]

    def _key(self, table: str, spec: dict[str, Any]) -> dict[str, Any]:
        if "Key" in spec:
            return dict(spec["Key"])
        known = self.tables.get(table)
        return known.key_of(spec["Item"]) if known else dict(spec["Item"])

    def _item(self, client: Any, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        """The item as moto holds it, read from its backend (no request, nothing metered)."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][client.meta.region_name]
        found = backend.get_item(table, key)
        return None if found is None else dict(found.to_json()["Attributes"])

    # --- reading the record --------------------------------------------------------------------

    def since(self, mark: int, *, exclude: tuple[str, ...] = ()) -> list[Request]:
        """Requests from index `mark` on, less those descending from the labels in `exclude`."""
        return [r for r in self.requests[mark:] if r.root not in exclude]

    def invocations_since(self, mark: int, *, exclude: tuple[str, ...] = ()) -> list[Invocation]:
        return [i for i in self.invocations[mark:] if i.root not in exclude]


@dataclass(frozen=True)
class RoundTrip:
    """Requests of one invocation that were in flight together: the step waited for them as one."""

    requests: tuple[Request, ...]
    behind_model: bool  # ended during a model call: the step was waiting for the model anyway

    @property
    def began(self) -> float:
        return min(r.began for r in self.requests)

    @property
    def ended(self) -> float:
        return max(r.ended for r in self.requests)


def round_trips(
    requests: list[Request], model_spans: Sequence[tuple[float, float]] = (), thread: int = 0
) -> list[RoundTrip]:
    """Group one invocation's requests by their timing: a request that began before every request of
    the current group had ended overlaps it (it was issued concurrently) and joins it; one that
    began after they all ended waited for them, and starts the next round trip. Nothing is taken from
    what the code declares. A group made off the invocation's own `thread` that ended while a model
    call (one of `model_spans`, from the loop's call into stepwise.llm to its answer) was still
    running is marked behind the model: the step was waiting for the model, not for it."""
    groups: list[list[Request]] = []
    for r in sorted(requests, key=lambda r: r.began):
        if groups and r.began < max(x.ended for x in groups[-1]):
            groups[-1].append(r)
        else:
            groups.append([r])
    out = []
    for g in groups:
        ended = max(r.ended for r in g)
        off_thread = all(r.thread != thread for r in g)
        behind = off_thread and any(a <= ended <= b for a, b in model_spans)
        out.append(RoundTrip(tuple(g), behind))
    return out


def _tables(operation: str, params: dict[str, Any]) -> tuple[str, ...]:
    if "TableName" in params:
        return (str(params["TableName"]),)
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return tuple(params.get("RequestItems") or ())
    if operation in ("TransactGetItems", "TransactWriteItems"):
        return tuple(
            dict.fromkeys(next(iter(a.values()))["TableName"] for a in params.get("TransactItems") or [])
        )
    return ()


def _with(request: Request, **changes: Any) -> Request:
    from dataclasses import replace

    return replace(request, **changes)


def _placed(
    request: Request, where: tuple[str, Invocation | None, str], began: float, response: dict[str, Any]
) -> Request:
    retries = int((response.get("ResponseMetadata") or {}).get("RetryAttempts") or 0)
    function, invocation, root = where
    return _with(
        request,
        function=function,
        invocation=invocation.id if invocation else 0,
        root=root,
        began=began,
        attempts=1 + retries,
    )

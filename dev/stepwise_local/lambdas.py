"""Lambda functions in process: the seam between moto and our handlers.

moto runs no Lambda code without Docker, so every invocation moto receives (from Step Functions'
interpreter or a boto3 `invoke`) is routed here and served by the handler that template.yaml names, in
this process. This depends on moto internals (`LambdaBackend.invoke`); moto is pinned, and
tests/integration/test_moto_seam.py fails loudly if the seam moves.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import threading
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger("stepwise_local")

Handler = Callable[[dict[str, Any], Any], Any]

# Held by every moto DynamoDB item call once make_dynamodb_writes_atomic is installed; the local state's
# saver holds it too, to read every table at one point in time.
DYNAMODB_LOCK = threading.RLock()


@dataclass
class FunctionSpec:
    logical_id: str
    code_dir: Path
    handler: str  # "app.handler"
    timeout: int = 30
    memory: int = 512
    name: str | None = None  # its FunctionName when the template fixes one (an ARN built from it finds it)


@dataclass
class LambdaContext:
    """What Powertools reads from a Lambda context object."""

    function_name: str
    memory_limit_in_mb: int
    invoked_function_arn: str
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


class FunctionError(Exception):
    """A handler raised: carries the payload Lambda would return with X-Amz-Function-Error."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(payload.get("errorMessage", ""))
        self.payload = payload


def _named_imports(path: Path) -> list[str]:
    """The modules a handler file imports anywhere (at its top and inside its functions)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


class Throttled(Exception):
    """An invocation past a function's reserved concurrency (Lambda's TooManyRequestsException)."""


class LocalLambdas:
    """The template's functions, importable and invocable by logical id or by name/ARN."""

    def __init__(self, functions: list[FunctionSpec], arn_of: Callable[[str], str]) -> None:
        self._specs = {f.logical_id: f for f in functions}
        self._names = {f.name: f.logical_id for f in functions if f.name}
        self._arn_of = arn_of
        self._modules: dict[Path, ModuleType] = {}
        self._lock = threading.Lock()
        self.invocations: dict[str, int] = {f.logical_id: 0 for f in functions}
        self._reserved: dict[str, int] = {}
        self._running: dict[str, int] = {}

    @contextmanager
    def reserved(self, logical_id: str, concurrency: int) -> Iterator[None]:
        """Within this block the function runs at most `concurrency` invocations at once and throttles
        the rest, as ReservedConcurrentExecutions does in AWS (Step Functions sees
        Lambda.TooManyRequestsException). Off by default: the local stack runs every invocation."""
        with self._lock:
            self._reserved[logical_id] = concurrency
        try:
            yield
        finally:
            with self._lock:
                self._reserved.pop(logical_id, None)

    @contextmanager
    def _slot(self, logical_id: str) -> Iterator[None]:
        with self._lock:
            cap = self._reserved.get(logical_id)
            running = self._running.get(logical_id, 0)
            if cap is not None and running >= cap:
                raise Throttled(f"{logical_id}: {running} of {cap} reserved executions under way")
            self._running[logical_id] = running + 1
        try:
            yield
        finally:
            with self._lock:
                self._running[logical_id] -= 1

    def logical_id(self, name_or_arn: str) -> str:
        name = name_or_arn.split(":function:")[-1].split(":")[0]
        name = self._names.get(name, name)
        if name not in self._specs:
            raise KeyError(f"no function {name_or_arn!r} in template.yaml")
        return name

    def _handler(self, spec: FunctionSpec) -> Handler:
        module_name, _, attr = spec.handler.rpartition(".")
        path = spec.code_dir / f"{module_name.replace('.', '/')}.py"
        with self._lock:
            module = self._modules.get(path)
            if module is None:
                unique = f"stepwise_fn_{spec.code_dir.name}_{module_name}".replace(".", "_")
                loader = importlib.util.spec_from_file_location(unique, path)
                if loader is None or loader.loader is None:
                    raise ImportError(f"cannot load {path}")
                module = importlib.util.module_from_spec(loader)
                loader.loader.exec_module(module)
                self._modules[path] = module
        handler: Handler = getattr(module, attr)
        return handler

    def preload(self) -> None:
        """Import every handler now. In Lambda one process serves one request at a time; here many
        threads share one process, and two of them importing the same module at once can see it half
        initialised. Loading up front takes that race away."""
        for spec in self._specs.values():
            self._handler(spec)
        # Handlers import their domain on their first call (light at init, as on Lambda); here that
        # first call would be on many threads at once, so the modules they name are imported now too,
        # and the API's route modules (which it loads per resource on first use).
        for path in {
            s.code_dir / f"{s.handler.rpartition('.')[0].replace('.', '/')}.py" for s in self._specs.values()
        }:
            for name in _named_imports(path):
                importlib.import_module(name)
        from stepwise.api import app

        app.build()

    def invoke(self, name_or_arn: str, event: Any) -> Any:
        """Call a function like Lambda does: JSON in, JSON out; an exception becomes FunctionError."""
        logical = self.logical_id(name_or_arn)
        spec = self._specs[logical]
        with self._slot(logical):  # Throttled when past its reserved concurrency (see `reserved`)
            self.invocations[logical] += 1
            return self._invoke(spec, logical, event)

    def _invoke(self, spec: FunctionSpec, logical: str, event: Any) -> Any:
        context = LambdaContext(logical, spec.memory, self._arn_of(logical))
        try:
            result = self._handler(spec)(json.loads(json.dumps(event)), context)
            return json.loads(json.dumps(result, default=str))
        except Exception as exc:
            # A named error is the loop speaking (the ASL retries or catches it); anything else is a
            # bug a run ends `internal_error` with, and its traceback is only here: say it loudly.
            from stepwise.core.errors import StepError

            level = logging.DEBUG if isinstance(exc, StepError) else logging.WARNING
            log.log(level, "%s raised %s", logical, type(exc).__name__, exc_info=True)
            raise FunctionError(
                {
                    "errorType": type(exc).__name__,
                    "errorMessage": str(exc),
                    "stackTrace": traceback.format_exception(exc)[-5:],
                }
            ) from exc


def install_moto_seam(lambdas: LocalLambdas) -> Callable[[], None]:
    """Route moto's Lambda invocations to `lambdas`; returns a function that undoes it."""
    from moto.awslambda.models import LambdaBackend
    from moto.awslambda_simple.models import LambdaSimpleBackend

    def invoke(
        backend: Any,
        function_name: str,
        qualifier: str | None,
        body: Any,
        headers: Any,
        response_headers: Any,
    ) -> bytes:
        event = json.loads(body) if body else {}
        if headers.get("X-Amz-Invocation-Type") == "Event":
            threading.Thread(target=_swallow, args=(lambdas, function_name, event), daemon=True).start()
            return b""
        try:
            payload = json.dumps(lambdas.invoke(function_name, event)).encode()
        except Throttled as err:  # Lambda's own refusal, not the function's error: a 429 to the caller
            from moto.core.exceptions import JsonRESTError

            refused = JsonRESTError("TooManyRequestsException", str(err))
            refused.code = 429
            raise refused from err
        except FunctionError as err:
            response_headers["x-amz-function-error"] = "Unhandled"
            payload = json.dumps(err.payload).encode()
        response_headers["Content-Length"] = str(len(payload))
        return payload

    originals = (LambdaBackend.invoke, LambdaSimpleBackend.invoke)
    LambdaBackend.invoke = invoke  # type: ignore[method-assign,assignment]
    LambdaSimpleBackend.invoke = invoke  # type: ignore[method-assign,assignment]

    def undo() -> None:
        LambdaBackend.invoke, LambdaSimpleBackend.invoke = originals  # type: ignore[method-assign]

    return undo


def make_dynamodb_writes_atomic() -> Callable[[], None]:
    """DynamoDB applies a conditional write atomically; moto checks the condition and writes without a
    lock, so two threads can both pass it. Serializing moto's item writes restores the guarantee every
    "exactly one wins" in Stepwise relies on (session claims, answers, ledger claims).

    Each request is also answered under the lock, not only applied under it: moto's update returns the
    stored item itself and turns it into the answer after the write, so an ADD answered with ALL_NEW
    could report a later writer's value. Two event-log reservations then got the same seqs and one
    batch overwrote the other (a workflow map's five items append at once: one item's
    `node_completed` went missing, about one full test run in ten). A read likewise serialized an item
    that another thread's update was changing. DynamoDB answers from the state its own write left.
    The backend's item methods keep their own lock (re-entered under a request's) for callers that
    reach the backend without a request, as the benches' meter does. Returns undo."""
    import functools

    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.responses import DynamoHandler

    lock = DYNAMODB_LOCK
    names = ("put_item", "update_item", "delete_item", "transact_write_items", "get_item", "query", "scan")
    originals: dict[tuple[type, str], Any] = {
        (DynamoDBBackend, name): getattr(DynamoDBBackend, name) for name in names
    }
    originals[(DynamoHandler, "call_action")] = DynamoHandler.__dict__["call_action"]

    def locked(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return method(*args, **kwargs)

        return call

    for (owner, name), method in originals.items():
        setattr(owner, name, locked(method))

    def undo() -> None:
        for (owner, name), method in originals.items():
            setattr(owner, name, method)

    return undo


# How long DynamoDB remembers a transaction's ClientRequestToken (TransactWriteItems API reference).
TRANSACTION_TOKEN_SECONDS = 600


def make_dynamodb_transactions_idempotent() -> Callable[[], None]:
    """DynamoDB makes TransactWriteItems idempotent on its ClientRequestToken, which botocore fills in
    (the member is an idempotency token) and sends unchanged on every retry: a retry of a transaction
    that was applied, but whose answer was lost on the way back, succeeds without applying it again. moto
    ignores the token, so that retry ran the transaction again and its conditions failed: the soak
    (issue 30) saw POST /runs answer 409 run_exists for the run it had itself just created. Remembers
    each applied token for 10 minutes, as DynamoDB does; the same token with other items is
    IdempotentParameterMismatchException. Returns undo."""
    import time

    from moto.core.exceptions import JsonRESTError
    from moto.dynamodb.responses import DynamoHandler

    original = DynamoHandler.transact_write_items
    applied: dict[str, tuple[float, str, Any]] = {}
    lock = threading.Lock()

    def transact_write_items(self: Any) -> Any:
        token = self.body.get("ClientRequestToken")
        if not token:
            return original(self)
        # Binary attributes arrive as bytes (botocore decoded their base64): compared by their hex.
        items = json.dumps(
            self.body.get("TransactItems"),
            sort_keys=True,
            default=lambda v: v.hex() if isinstance(v, bytes) else str(v),
        )
        now = time.monotonic()
        with lock:
            for old in [t for t, (at, _, _) in applied.items() if now - at > TRANSACTION_TOKEN_SECONDS]:
                del applied[old]
            seen = applied.get(token)
        if seen is not None:
            if seen[1] != items:
                raise JsonRESTError(
                    "IdempotentParameterMismatchException",
                    "the ClientRequestToken was used with other parameters",
                )
            return seen[2]
        result = original(self)
        with lock:
            applied[token] = (time.monotonic(), items, result)
        return result

    DynamoHandler.transact_write_items = transact_write_items  # type: ignore[method-assign]

    def undo() -> None:
        DynamoHandler.transact_write_items = original  # type: ignore[method-assign]

    return undo


def make_stop_execution_safe() -> Callable[[], None]:
    """moto's StopExecution reads the execution's environment, which its worker thread sets a moment
    after the execution starts; a stop in that moment raised AttributeError (a 500 for our cancel).
    Wait for the environment instead, as Step Functions has no such window. Returns undo."""
    import time

    from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker

    original = ExecutionWorker.stop

    def stop(self: Any, stop_date: Any, error: str | None, cause: str | None) -> None:
        deadline = time.monotonic() + 5
        while getattr(self, "env", None) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if getattr(self, "env", None) is not None:
            original(self, stop_date, error, cause)

    ExecutionWorker.stop = stop  # type: ignore[method-assign]

    def undo() -> None:
        ExecutionWorker.stop = original  # type: ignore[method-assign]

    return undo


def make_start_execution_atomic() -> Callable[[], None]:
    """moto's StartExecution looks for an execution of the same name, then creates one, with nothing
    between the two, so two starts of one run at the same moment (a retried start beside the first, a
    session handing on a run that the API also starts) could both create one and run its steps twice
    side by side. Step Functions makes a name unique atomically, so the local stack starts one at a
    time. Returns undo."""
    import threading

    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    original = StepFunctionsParserBackend.start_execution
    lock = threading.Lock()

    def start_execution(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            return original(self, *args, **kwargs)

    StepFunctionsParserBackend.start_execution = start_execution  # type: ignore[method-assign]

    def undo() -> None:
        StepFunctionsParserBackend.start_execution = original  # type: ignore[method-assign]

    return undo


def make_task_callbacks_safe() -> Callable[[], None]:
    """moto's SendTaskSuccess, SendTaskFailure and SendTaskHeartbeat look for the token in every running
    execution's environment, including one whose worker has not set its environment yet (the window
    make_stop_execution_safe waits out): with many executions starting at once (an eval run's cases) a
    callback for another execution raised AttributeError, the Lambda that sent it failed, and the run
    waiting on that token never resumed. An execution without an environment holds no token yet, so the
    search skips it (Step Functions has no such window). Returns undo."""
    from moto.stepfunctions.parser.models import StepFunctionsParserBackend

    original = StepFunctionsParserBackend._get_executions

    def started(self: Any, execution_status: Any = None) -> list[Any]:
        found = original(self, execution_status)
        return [e for e in found if getattr(getattr(e, "exec_worker", None), "env", None) is not None]

    StepFunctionsParserBackend._get_executions = started  # type: ignore[method-assign]

    def undo() -> None:
        StepFunctionsParserBackend._get_executions = original  # type: ignore[method-assign]

    return undo


def _swallow(lambdas: LocalLambdas, name: str, event: Any) -> None:
    """An async (Event) invocation: Lambda reports its failure to nobody but the logs."""
    try:
        lambdas.invoke(name, event)
    except Throttled as err:  # Lambda would queue and retry an async event; here it is only logged
        log.warning("async invocation of %s throttled: %s", name, err)
    except FunctionError as err:
        log.warning("async invocation of %s failed: %s", name, err.payload.get("errorMessage"))

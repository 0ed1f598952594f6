"""Keeping the local stack's moto state in its state directory (state.py is the file format).

Why a snapshot of moto rather than another engine: moto's backends are what every test exercises, so
the stack that remembers must be the same engine as the one that does not. What to keep is read from
what the stack created out of template.yaml (every table, bucket, key and secret it made), never
listed here. moto has no export, so this reads and writes its backends directly for DynamoDB items,
KMS key material and schedules (a Scan through boto3 would cost a full serialization round trip per
flush); S3 goes through the API, which says everything an object is. moto is pinned, and the restart
tests in tests/e2e/test_local_state.py fail if any of these internals move.

When: a write to DynamoDB, S3 or the Scheduler marks what it touched; a background thread saves
DEBOUNCE seconds after the first mark (so a burst of writes costs one save), re-reading only the tables
that changed, and once more on stop. A kill -9 loses at most the last DEBOUNCE seconds.
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from stepwise_local.lambdas import DYNAMODB_LOCK
from stepwise_local.state import FORMAT, VERSION, KmsKey, Snapshot, StateDir, StoredObject

if TYPE_CHECKING:
    from pathlib import Path

    from stepwise_local.scheduler import LocalScheduler

log = logging.getLogger("stepwise_local")

DEBOUNCE = 0.3  # seconds between the first unsaved write and its save
ACCOUNT, REGION = "123456789012", "us-east-1"  # the stack's (stack.py), where moto keeps its backends

# moto's mutating methods, by what they change. A call marks its table (or everything it may touch).
_DYNAMODB_WRITES = ("put_item", "update_item", "delete_item", "transact_write_items")
_S3_WRITES = (
    "put_object",
    "delete_object",
    "delete_objects",
    "copy_object",
    "complete_multipart_upload",
    "put_object_tagging",
    "delete_object_tagging",
)
_SCHEDULER_WRITES = ("create_schedule", "update_schedule", "delete_schedule")
_ALL = "*"


def _dynamodb() -> Any:
    from moto.dynamodb.models import dynamodb_backends

    return dynamodb_backends[ACCOUNT][REGION]


def _kms() -> Any:
    from moto.kms.models import kms_backends

    return kms_backends[ACCOUNT][REGION]


def _scheduler() -> Any:
    from moto.scheduler.models import scheduler_backends

    return scheduler_backends[ACCOUNT][REGION]


class LocalState:
    """The stack's remembered state: restored while the stack comes up, saved after every change."""

    def __init__(self, directory: StateDir, snapshot: Snapshot | None) -> None:
        self.directory = directory
        self.snapshot = snapshot
        self._secrets: dict[str, str] = {}
        self._keys: dict[str, KmsKey] = {}
        self._tables: dict[str, str] = {}  # logical id → table name
        self._buckets: dict[str, str] = {}  # logical id → bucket name
        self._table_json: dict[str, str] = {}  # logical id → its items as last saved, serialized
        self._objects: dict[str, dict[str, StoredObject]] = {}
        self._schedules: list[dict[str, Any]] = []
        self._scheduler: LocalScheduler | None = None
        self._s3: Any = None
        self._dirty: set[str] = set()  # table names, "s3", "schedules", or _ALL
        self._marks = threading.Lock()
        self._saving = threading.Lock()
        self._changed = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._undo: list[Callable[[], None]] = []

    @classmethod
    def open(cls, path: Path) -> LocalState:
        """Lock `path` and read what it remembers; a StateError says why it cannot be used."""
        directory = StateDir(path)
        return cls(directory, directory.open())

    @property
    def remembered(self) -> bool:
        return self.snapshot is not None

    # --- While the stack comes up --------------------------------------------------------------------

    def secret(self, logical: str, fresh: Callable[[], str]) -> str:
        """The value a Secrets Manager secret of the template was created with, else a fresh one."""
        value = self.snapshot.secrets.get(logical) if self.snapshot else None
        self._secrets[logical] = value or fresh()
        return self._secrets[logical]

    def kms_key(self, logical: str, created_id: str) -> tuple[str, str]:
        """Give the key moto just created the id and material it had before (stored ciphertexts name
        the key id and decrypt only with its material); returns its (id, ARN)."""
        backend = _kms()
        saved = self.snapshot.kms_keys.get(logical) if self.snapshot else None
        key = backend.keys[created_id]
        if saved is not None and saved.key_id != created_id:
            del backend.keys[created_id]
            key.arn = key.arn.replace(created_id, saved.key_id)
            key.id, key.key_material = saved.key_id, saved.key()
            backend.keys[saved.key_id] = key
        self._keys[logical] = KmsKey.of(key.id, key.key_material)
        return key.id, key.arn

    def restore(self, resources: dict[str, Any], physical: dict[str, str], s3: Any) -> None:
        """Put back every table's items, every bucket's objects and the schedules. `resources` (the
        template's) and `physical` (their local names) say what the stack created; what it created is
        what is kept from now on. (Not the stack's Resolver itself: the stack imports this module.)"""
        for logical, res in resources.items():
            if res["Type"] == "AWS::DynamoDB::Table":
                self._tables[logical] = physical[logical]
            elif res["Type"] == "AWS::S3::Bucket":
                self._buckets[logical] = physical[logical]
        self._s3 = s3
        snapshot = self.snapshot
        if snapshot is None:
            return
        backend = _dynamodb()
        for logical, items in snapshot.tables.items():
            if logical in self._tables:  # a table the template no longer declares is left behind
                for item in items:
                    backend.put_item(self._tables[logical], item)
        for logical, objects in snapshot.objects.items():
            if logical in self._buckets:
                for key, stored in objects.items():
                    extra: dict[str, Any] = {"Metadata": stored.metadata}
                    if stored.content_type:
                        extra["ContentType"] = stored.content_type
                    if stored.tags:
                        extra["Tagging"] = urlencode(stored.tags)
                    body = self.directory.object(stored.blob)
                    s3.put_object(Bucket=self._buckets[logical], Key=key, Body=body, **extra)
        self._restore_schedules(snapshot.schedules)

    def _restore_schedules(self, schedules: list[dict[str, Any]]) -> None:
        backend = _scheduler()
        for saved in schedules:
            if saved["GroupName"] not in backend.schedule_groups:
                continue
            # Created without its StartDate, which moto refuses once it is past, then given it back, with
            # its creation date: the local scheduler counts a schedule's fire times from them.
            schedule = backend.create_schedule(
                description=saved.get("Description"),
                end_date=saved.get("EndDate"),
                flexible_time_window=saved["FlexibleTimeWindow"],
                group_name=saved["GroupName"],
                kms_key_arn=saved.get("KmsKeyArn"),
                name=saved["Name"],
                schedule_expression=saved["ScheduleExpression"],
                schedule_expression_timezone=saved.get("ScheduleExpressionTimezone"),
                start_date=None,
                state=saved.get("State"),
                target=saved["Target"],
                action_after_completion=saved.get("ActionAfterCompletion"),
            )
            schedule.start_date = saved.get("StartDate")
            schedule.creation_date = saved["CreationDate"]
            schedule.last_modified_date = saved["LastModificationDate"]

    @property
    def fired(self) -> dict[str, datetime]:
        return dict(self.snapshot.fired) if self.snapshot else {}

    # --- Saving --------------------------------------------------------------------------------------

    def start(self, scheduler: LocalScheduler) -> None:
        """Save now (so the directory holds this stack from the start), then after every change."""
        self._scheduler = scheduler
        scheduler.on_fired = self._fire_time_moved
        self._undo = [
            _watch_dynamodb(self._mark),
            _watch("moto.s3.models", "S3Backend", _S3_WRITES, lambda: self._mark({"s3"})),
            _watch(
                "moto.scheduler.models",
                "EventBridgeSchedulerBackend",
                _SCHEDULER_WRITES,
                lambda: self._mark({"schedules"}),
            ),
        ]
        self._dirty = {_ALL}
        self.save()
        self._thread = threading.Thread(target=self._run, name="local-state", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching, save what is not saved yet, and let the directory go."""
        if self._thread is not None:
            self._stopping.set()
            self._changed.set()
            self._thread.join()
            self._thread = None
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        try:
            if self._dirty:
                self.save()
        finally:
            self.directory.close()

    def _mark(self, what: set[str]) -> None:
        with self._marks:
            self._dirty |= what
        self._changed.set()

    def _fire_time_moved(self) -> None:
        self._mark(set())  # a fire time moved: the next save carries it, nothing needs re-reading

    def _run(self) -> None:
        while True:
            self._changed.wait()
            if self._stopping.wait(DEBOUNCE):
                return  # close() saves the rest
            self._changed.clear()
            try:
                self.save()
            except Exception:  # a failed save must not end the saver; everything is saved next time
                log.exception("could not save the local stack's state in %s", self.directory.path)
                self._mark({_ALL})
                self._stopping.wait(1.0)

    def save(self) -> None:
        """Write the snapshot: what was marked since the last save is read again, the rest reused."""
        with self._saving:
            try:
                dirty = self._read_tables()
                if _ALL in dirty or "s3" in dirty:
                    self._objects = {logical: self._read_bucket(logical) for logical in self._buckets}
                if _ALL in dirty or "schedules" in dirty:
                    self._schedules = _read_schedules()
                self.directory.write(self._header(), self._table_json)
            except Exception:
                self._mark({_ALL})  # what this save took off the marks is saved by the next one
                raise
            if _ALL in dirty or "s3" in dirty:
                kept = {o.blob for objects in self._objects.values() for o in objects.values()}
                self.directory.drop_objects_except(kept)

    def _read_tables(self) -> set[str]:
        """Serialize the marked tables; returns the marks taken. DynamoDB is read first and under its
        lock (one point in time for every table), S3 after it, so an item that names an object is never
        saved without the object (the object is always written before the item)."""
        with DYNAMODB_LOCK:
            with self._marks:
                dirty, self._dirty = self._dirty, set()
            backend = _dynamodb()
            for logical, name in self._tables.items():
                if _ALL in dirty or name in dirty or logical not in self._table_json:
                    items = [item.to_json()["Attributes"] for item in backend.get_table(name).all_items()]
                    self._table_json[logical] = _json(items)
        return dirty

    def _header(self) -> dict[str, Any]:
        fired = self._scheduler.fired if self._scheduler else {}
        return {
            "format": FORMAT,
            "version": VERSION,
            "saved_at": datetime.now(UTC).isoformat(),
            "objects": {
                bucket: {key: o.model_dump(mode="json") for key, o in objects.items()}
                for bucket, objects in self._objects.items()
            },
            "kms_keys": {logical: key.model_dump(mode="json") for logical, key in self._keys.items()},
            "secrets": self._secrets,
            "schedules": self._schedules,
            "fired": {arn: when.isoformat() for arn, when in fired.items()},
        }

    def _read_bucket(self, logical: str) -> dict[str, StoredObject]:
        """The bucket's current objects; a body is read only when its ETag changed since the last save."""
        bucket, known = self._buckets[logical], self._objects.get(logical, {})
        out: dict[str, StoredObject] = {}
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for listed in page.get("Contents", []):
                key, etag = listed["Key"], listed["ETag"]
                if key in known and known[key].etag == etag:
                    out[key] = known[key]
                    continue
                got = self._s3.get_object(Bucket=bucket, Key=key)
                tags = self._s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
                out[key] = StoredObject(
                    blob=self.directory.put_object(got["Body"].read()),
                    etag=got["ETag"],
                    content_type=got.get("ContentType"),
                    metadata=got.get("Metadata") or {},
                    tags={t["Key"]: t["Value"] for t in tags},
                )
        return out


def _json(items: list[dict[str, Any]]) -> str:
    """Items as DynamoDB's wire JSON. moto hands nested binary values back decoded (top-level ones stay
    base64, as on the wire): encoding them again gives what put_item takes."""
    return json.dumps(items, separators=(",", ":"), default=_base64)


def _base64(value: Any) -> str:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not a DynamoDB value")


def _read_schedules() -> list[dict[str, Any]]:
    backend = _scheduler()
    return [s.to_dict() for group in backend.schedule_groups.values() for s in group.schedules.values()]


def _watch(module: str, name: str, methods: tuple[str, ...], mark: Callable[[], None]) -> Callable[[], None]:
    """Call `mark` after each of the class's `methods`; returns undo."""
    import importlib

    cls = getattr(importlib.import_module(module), name)
    originals = {method: getattr(cls, method) for method in methods}  # AttributeError: moto moved; say so now

    def marking(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return method(*args, **kwargs)
            finally:
                mark()

        return call

    for attr, method in originals.items():
        setattr(cls, attr, marking(method))

    def undo() -> None:
        for attr, method in originals.items():
            setattr(cls, attr, method)

    return undo


def _watch_dynamodb(mark: Callable[[set[str]], None]) -> Callable[[], None]:
    """Mark the table each item write names (a transaction: every table), inside the lock that
    serializes moto's item writes, so a save under that lock sees every write it was told about."""
    from moto.dynamodb.models import DynamoDBBackend

    originals = {name: getattr(DynamoDBBackend, name) for name in _DYNAMODB_WRITES}

    def marking(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            table = kwargs.get("table_name", args[0] if args else None)
            with DYNAMODB_LOCK:
                try:
                    return method(self, *args, **kwargs)
                finally:
                    mark({table} if isinstance(table, str) else {_ALL})

        return call

    for name, method in originals.items():
        setattr(DynamoDBBackend, name, marking(method))

    def undo() -> None:
        for name, method in originals.items():
            setattr(DynamoDBBackend, name, method)

    return undo

"""The local stack's state on disk: what `make run` remembers across restarts, in `.stepwise/`.

moto's in-memory backends stay the engine; this only keeps a snapshot of them. One file, `state.json`,
holds every DynamoDB table's items, the S3 objects' index, the KMS key material and Secrets Manager
values the stack was created with (settings are KMS ciphertexts and approval links are signed with a
secret: without them, what was stored would no longer decrypt or verify), the Scheduler's schedules and
the local scheduler's last fire times. S3 bodies live beside it in `objects/`, one immutable file per
content hash, so a snapshot never rewrites a file it already wrote.

Every write is a temporary file, fsynced, then renamed over the old one: a crash (kill -9, power loss)
leaves either the previous snapshot or the new one, never half of one. Objects are written before the
snapshot that names them and removed only after a snapshot that no longer does. The file carries a
format name and a version; anything else (unparsable, another version, an object missing) is refused
with a message saying what to do, never wiped.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import json
import os
import re
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

FORMAT = "stepwise-local-state"
VERSION = 1
SNAPSHOT = "state.json"
OBJECTS = "objects"
LOCK = "lock"
MEMORY = "memory"  # STEPWISE_LOCAL_STATE's value for "remember nothing"
STATE_ENV = "STEPWISE_LOCAL_STATE"
DEFAULT_DIR = ".stepwise"
_BLOB = re.compile(r"^[0-9a-f]{64}$")


class StateError(Exception):
    """The state directory cannot be used as it is; the message says why and what to do."""


def state_dir(environ: dict[str, str] | None = None) -> Path | None:
    """Where `make run` keeps its state: $STEPWISE_LOCAL_STATE, `.stepwise` by default; None for `memory`."""
    value = (os.environ if environ is None else environ).get(STATE_ENV) or DEFAULT_DIR
    return None if value == MEMORY else Path(value).resolve()


class KmsKey(BaseModel):
    key_id: str
    material: str  # base64 of the symmetric key moto encrypts with; ciphertexts name key_id

    @classmethod
    def of(cls, key_id: str, material: bytes) -> KmsKey:
        return cls(key_id=key_id, material=base64.b64encode(material).decode())

    def key(self) -> bytes:
        return base64.b64decode(self.material, validate=True)


class StoredObject(BaseModel):
    blob: str = Field(pattern=_BLOB.pattern)  # sha256 of the body, its file under objects/
    etag: str  # S3's, to tell an unchanged object without reading it again
    content_type: str | None = None
    metadata: dict[str, str] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)


class Snapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["stepwise-local-state"]
    version: Literal[1]
    saved_at: datetime
    tables: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)  # logical id → items (wire JSON)
    objects: dict[str, dict[str, StoredObject]] = Field(default_factory=dict)  # bucket logical id → key →
    kms_keys: dict[str, KmsKey] = Field(default_factory=dict)  # logical id →
    secrets: dict[str, str] = Field(default_factory=dict)  # logical id → SecretString
    schedules: list[dict[str, Any]] = Field(default_factory=list)  # moto's Schedule.to_dict()
    fired: dict[str, datetime] = Field(default_factory=dict)  # schedule ARN → last fire time delivered


def _refuse(directory: Path, why: str) -> StateError:
    return StateError(
        f"the local stack's state in {directory} cannot be read: {why}. Nothing was changed. Move the "
        f"directory away (or `rm -rf {directory}` to start empty), or run with {STATE_ENV}=memory."
    )


class StateDir:
    """One state directory, held by one stack at a time (an exclusive lock for as long as it is open)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory
        self._lock: IO[str] | None = None

    def open(self) -> Snapshot | None:
        """Lock the directory and read its snapshot (None: nothing remembered yet)."""
        try:
            # It holds KMS key material and secret values: the developer's alone (0700; files 0600).
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.path, 0o700)
            (self.path / OBJECTS).mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create the local state directory {self.path}: {exc}") from exc
        lock = (self.path / LOCK).open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise StateError(
                f"another local stack is using {self.path}; stop it, or point {STATE_ENV} elsewhere"
            ) from None
        self._lock = lock
        try:
            return self.read()
        except StateError:
            self.close()
            raise

    def read(self) -> Snapshot | None:
        file = self.path / SNAPSHOT
        if not file.exists():
            return None
        try:
            raw = json.loads(file.read_bytes())
        except (OSError, ValueError) as exc:
            raise _refuse(self.path, f"{file.name} is not valid JSON ({exc})") from exc
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise _refuse(self.path, f"{file.name} is not a {FORMAT} file")
        if raw.get("version") != VERSION:
            raise _refuse(
                self.path,
                f"{file.name} is version {raw.get('version')!r} of the format; this stack reads version "
                f"{VERSION}",
            )
        try:
            snapshot = Snapshot.model_validate(raw)
        except ValidationError as exc:
            raise _refuse(self.path, f"{file.name} does not match version {VERSION} ({exc})") from exc
        try:
            for key in snapshot.kms_keys.values():
                key.key()
        except binascii.Error as exc:
            raise _refuse(self.path, f"a KMS key's material is not base64 ({exc})") from exc
        blobs = {o.blob for objects in snapshot.objects.values() for o in objects.values()}
        missing = [blob for blob in blobs if not self.has(blob)]
        if missing:
            raise _refuse(self.path, f"{len(missing)} stored object(s) are missing from {OBJECTS}/")
        return snapshot

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the flock
            self._lock = None

    # --- Objects (S3 bodies) -------------------------------------------------------------------------

    def has(self, blob: str) -> bool:
        return (self.path / OBJECTS / blob).is_file()

    def put_object(self, body: bytes) -> str:
        """Store a body under its hash (a no-op when it is there already); returns the hash."""
        blob = hashlib.sha256(body).hexdigest()
        if not self.has(blob):
            write_atomically(self.path / OBJECTS / blob, body)
        return blob

    def object(self, blob: str) -> bytes:
        return (self.path / OBJECTS / blob).read_bytes()

    def drop_objects_except(self, kept: set[str]) -> None:
        """Remove the bodies no snapshot names any more (call only after writing the snapshot)."""
        for file in (self.path / OBJECTS).iterdir():
            if _BLOB.match(file.name) and file.name not in kept:
                with contextlib.suppress(FileNotFoundError):
                    file.unlink()

    # --- The snapshot ------------------------------------------------------------------------------

    def write(self, header: dict[str, Any], tables: dict[str, str]) -> None:
        """Replace the snapshot. `tables` maps a table to its items already serialized as a JSON array,
        so that a table nothing wrote to since the last snapshot is not serialized again."""
        body = json.dumps(header, separators=(",", ":"), default=str)
        inner = ",".join(f"{json.dumps(name)}:{items}" for name, items in sorted(tables.items()))
        text = body[:-1] + f',"tables":{{{inner}}}}}'
        write_atomically(self.path / SNAPSHOT, text.encode())


def write_atomically(target: Path, data: bytes) -> None:
    """`target` holds `data` entirely or keeps what it held: a temporary file beside it, fsynced, renamed
    over it, and the directory fsynced so the rename itself survives a crash."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

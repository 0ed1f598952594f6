"""The local stack's state directory (stepwise_local.state): what a crash leaves, what is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from stepwise_local.state import (
    FORMAT,
    SNAPSHOT,
    VERSION,
    StateDir,
    StateError,
    StoredObject,
    state_dir,
)

ITEM = {"tenant_id": {"S": "local"}, "blob": {"B": "AAEC"}}


def header(**extra: Any) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "saved_at": "2026-01-01T00:00:00+00:00", **extra}


def opened(path: Path) -> StateDir:
    directory = StateDir(path)
    directory.open()
    return directory


def test_a_written_snapshot_reads_back_with_its_tables_and_objects(tmp_path: Path) -> None:
    # Given a snapshot with one table's items and one stored object
    directory = opened(tmp_path)
    blob = directory.put_object(b"hello")
    stored = StoredObject(blob=blob, etag='"x"', content_type="text/plain")
    directory.write(header(objects={"Bucket": {"k": stored.model_dump()}}), {"Runs": json.dumps([ITEM])})

    # When it is read again
    snapshot = directory.read()

    # Then it is what was written
    assert snapshot is not None
    assert snapshot.tables == {"Runs": [ITEM]}
    assert snapshot.objects["Bucket"]["k"] == stored and directory.object(blob) == b"hello"
    directory.close()


def test_a_crash_while_writing_leaves_the_previous_snapshot_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a saved snapshot
    directory = opened(tmp_path)
    directory.write(header(), {"Runs": json.dumps([ITEM])})
    before = (tmp_path / SNAPSHOT).read_bytes()

    # When the next save dies before its rename (what kill -9 in the middle of a save amounts to)
    def crash(src: object, dst: object) -> None:
        raise OSError("killed")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="killed"):
        directory.write(header(), {"Runs": json.dumps([ITEM, ITEM])})

    # Then the previous snapshot is intact and readable, and no temporary file is left behind
    assert (tmp_path / SNAPSHOT).read_bytes() == before
    snapshot = directory.read()
    assert snapshot is not None and snapshot.tables == {"Runs": [ITEM]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock", "objects", SNAPSHOT]
    directory.close()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"format": "stepwise-local-state", "version": 1, "tables": {', "not valid JSON"),
        ('{"tables": {}}', f"not a {FORMAT} file"),
        (json.dumps(header(version=2)), "version 2 of the format; this stack reads version 1"),
        (json.dumps({**header(), "tables": {"Runs": "nope"}}), "does not match version 1"),
    ],
)
def test_an_unreadable_snapshot_is_refused_saying_what_to_do_and_left_alone(
    tmp_path: Path, content: str, said: str
) -> None:
    (tmp_path / SNAPSHOT).write_text(content)

    with pytest.raises(StateError) as refused:
        StateDir(tmp_path).open()

    message = str(refused.value)
    assert said in message and "Nothing was changed" in message
    assert f"rm -rf {tmp_path}" in message and "STEPWISE_LOCAL_STATE=memory" in message
    assert (tmp_path / SNAPSHOT).read_text() == content
    (tmp_path / SNAPSHOT).unlink()
    assert StateDir(tmp_path).open() is None  # the refusal let the lock go: the directory is usable


def test_a_snapshot_naming_a_missing_object_is_refused(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    stored = StoredObject(blob="0" * 64, etag='"x"')
    directory.write(header(objects={"Bucket": {"k": stored.model_dump()}}), {})
    directory.close()

    with pytest.raises(StateError, match="1 stored object"):
        StateDir(tmp_path).open()


def test_one_stack_at_a_time_holds_a_directory(tmp_path: Path) -> None:
    first = opened(tmp_path)

    with pytest.raises(StateError, match="another local stack is using"):
        StateDir(tmp_path).open()

    first.close()
    opened(tmp_path).close()  # free again once the first let go


def test_only_objects_no_snapshot_names_are_dropped(tmp_path: Path) -> None:
    directory = opened(tmp_path)
    kept, dropped = directory.put_object(b"kept"), directory.put_object(b"dropped")
    (tmp_path / "objects" / "notes.txt").write_text("not ours")

    directory.drop_objects_except({kept})

    assert directory.has(kept) and not directory.has(dropped)
    assert (tmp_path / "objects" / "notes.txt").exists()
    directory.close()


def test_the_state_directory_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert state_dir({}) == tmp_path / ".stepwise"
    assert state_dir({"STEPWISE_LOCAL_STATE": "memory"}) is None
    assert state_dir({"STEPWISE_LOCAL_STATE": "elsewhere"}) == tmp_path / "elsewhere"


def test_the_state_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    # Given a state directory that holds key material and secret values, with a permissive umask
    previous = os.umask(0o022)
    try:
        directory = opened(tmp_path / "state")
        blob = directory.put_object(b"secret bytes")
        directory.write(header(), {"Runs": json.dumps([ITEM])})
    finally:
        os.umask(previous)

    # Then neither the directory nor what it holds is open to other users
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "state" / SNAPSHOT).stat().st_mode & 0o777 == 0o600
    stored = [p for p in (tmp_path / "state").rglob("*") if p.is_file() and blob in p.name]
    assert stored and all(p.stat().st_mode & 0o777 == 0o600 for p in stored)
    directory.close()

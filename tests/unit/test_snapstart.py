"""SnapStart hooks: registered only where Lambda's runtime offers them, litellm warmed only when init
runs ahead of requests, and every cached client forgotten after a restore."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.core import aws, config, snapstart

INIT_TYPE = config.Platform.variable("initialization_type")  # set by Lambda during init


@pytest.fixture(autouse=True)
def _fresh_prepare(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(snapstart, "_prepared", None)
    yield


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Lambda's `snapshot_restore_py`, recording the after-restore hooks registered with it."""
    hooks: list[Any] = []
    module = types.ModuleType("snapshot_restore_py")
    module.register_after_restore = lambda func, *args, **kwargs: hooks.append(func)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", module)
    return hooks


@pytest.fixture
def rebinds(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """The store's tables module, recording rebinds (the real one needs every table in the environment)."""
    calls: list[bool] = []
    tables = types.ModuleType("stepwise.core.tables")
    tables.rebind = lambda: calls.append(True)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "stepwise.core.tables", tables)
    return calls


@pytest.fixture
def warmed() -> list[bool]:
    """Each call of `warm`, the function the handler hands to prepare."""
    return []


def warm_into(calls: list[bool]) -> Any:
    return lambda: calls.append(True)


def test_without_the_lambda_runtime_nothing_is_registered_or_warmed(
    monkeypatch: pytest.MonkeyPatch, warmed: list[bool]
) -> None:
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # makes the import fail, as off Lambda
    monkeypatch.setenv(INIT_TYPE, "snap-start")

    assert snapstart.prepare(warm_into(warmed)) is False
    assert warmed == []


def test_under_snapstart_the_hook_is_registered_once_and_litellm_is_warmed(
    monkeypatch: pytest.MonkeyPatch, runtime: list[Any], warmed: list[bool]
) -> None:
    monkeypatch.setenv(INIT_TYPE, "snap-start")

    assert snapstart.prepare(warm_into(warmed)) is True
    assert snapstart.prepare(warm_into(warmed)) is True  # a second caller changes nothing

    assert runtime == [snapstart.after_restore]
    assert warmed == [True]


def test_an_on_demand_init_leaves_litellm_to_the_first_model_call(
    monkeypatch: pytest.MonkeyPatch, runtime: list[Any], warmed: list[bool]
) -> None:
    monkeypatch.setenv(INIT_TYPE, "on-demand")

    assert snapstart.prepare(warm_into(warmed)) is True

    assert runtime == [snapstart.after_restore]
    assert warmed == []


class FakeClientCache:
    def __init__(self) -> None:
        self.flushed = False

    def flush_cache(self) -> None:
        self.flushed = True


def test_after_restore_forgets_every_cached_client(
    monkeypatch: pytest.MonkeyPatch, rebinds: list[bool]
) -> None:
    # Given boto3 and litellm clients built before the snapshot
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # else boto3 asks the instance metadata service
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    before = aws.client("sts")
    cache = FakeClientCache()
    litellm = types.ModuleType("litellm")
    litellm.in_memory_llm_clients_cache = cache  # type: ignore[attr-defined]
    litellm.module_level_client = object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "litellm", litellm)

    # When the runtime restores the snapshot
    snapstart.after_restore()

    # Then each is rebuilt on its next use
    assert aws.client("sts") is not before
    assert cache.flushed
    assert not hasattr(litellm, "module_level_client")
    assert rebinds == [True]


def test_after_restore_reseeds_random(rebinds: list[bool]) -> None:
    import random

    random.seed(7)
    snapshot = random.getstate()

    snapstart.after_restore()

    assert random.getstate() != snapshot

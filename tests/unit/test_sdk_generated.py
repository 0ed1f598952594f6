"""The SDK's sync client is generated from its async one (sdk/python/scripts/generate_sync.py): the
committed `_sync.py` must be what the generator writes today, so the two clients cannot drift."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "sdk" / "python" / "scripts" / "generate_sync.py"


def _load() -> ModuleType:
    # scripts/ holds scripts, not a package.
    spec = importlib.util.spec_from_file_location("stepwise_sdk_generate_sync", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


generator = _load()


def test_the_committed_sync_client_is_the_generator_s_output() -> None:
    expected = generator.generate(generator.SOURCE.read_text())

    assert generator.TARGET.read_text() == expected, (
        "_sync.py is not what _async.py generates: edit _async.py, then run `make sdk-sync` "
        "(python3 sdk/python/scripts/generate_sync.py)"
    )


def test_async_names_and_keywords_become_their_sync_twins() -> None:
    source = (
        "class AsyncThing(AsyncIterator[int]):\n"
        "    async def __anext__(self) -> int:\n"
        "        async with self.lock:\n"
        '            await self._http.aclose()  # "AsyncThing" in a comment stays\n'
        "        raise StopAsyncIteration\n"
    )

    assert generator.unasync(source) == (
        "class Thing(Iterator[int]):\n"
        "    def __next__(self) -> int:\n"
        "        with self.lock:\n"
        '            self._http.close()  # "AsyncThing" in a comment stays\n'
        "        raise StopIteration\n"
    )


def test_a_replacement_that_no_longer_matches_fails_the_generation() -> None:
    with pytest.raises(ValueError, match="update REPLACEMENTS"):
        generator.generate("async def f() -> None:\n    await g()\n")

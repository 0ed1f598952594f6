"""The working conversation of a run, cached in the function between its steps.

Step Functions invokes one run's steps one after another, and a warm function usually serves the
next one: keeping the conversation here spares reading the session's history on every step. The cache
is keyed by run and context version. The first step folds the last completed run into the history
that run began with (its checkpoint plus its messages) and keeps the result as this run's checkpoint;
any later miss (another function wrote a step, or this one was recycled) rebuilds from the checkpoint
and the run's own messages. Neither reads the session's other runs.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from stepwise.loop import whatif
from stepwise.runs.models import Run
from stepwise.runs.ports import SessionMessage, stores
from stepwise.sessions.models import Earlier

CACHED_RUNS = 32  # a function serves one step at a time; a few runs cover the local stack's threads


@dataclass
class Working:
    run: Run
    version: int
    earlier: Earlier = field(default_factory=Earlier)  # the session's completed runs
    current: list[dict[str, Any]] = field(default_factory=list)  # this run's messages so far
    # Messages of `current` to be written with the step's next context write (stepwise.loop.step).
    unsaved: list[SessionMessage] = field(default_factory=list)

    @property
    def history(self) -> list[dict[str, Any]]:
        return [*self.earlier.messages, *self.current]


_cache: OrderedDict[tuple[str, str], Working] = OrderedDict()
_lock = threading.Lock()


def cached_run(tenant_id: str, run_id: str) -> Run | None:
    """The run's record as this function last saw it (its agent, user and budgets never change), or
    None: what a step can read its agent by before it knows whether its conversation is cached."""
    with _lock:
        cached = _cache.get((tenant_id, run_id))
    return None if cached is None else cached.run


def load(tenant_id: str, run_id: str, version: int, *, run: Run | None = None) -> Working:
    """The run and its conversation as of context `version`: from the cache, else from DynamoDB
    (`run`: its record, when the caller has just read it)."""
    key = (tenant_id, run_id)
    with _lock:
        cached = _cache.get(key)
        if cached is not None and cached.version == version:
            _cache.move_to_end(key)
            return cached
    store = stores()
    if run is None:
        run = store.runs.get(tenant_id, run_id)
    if not version and run.what_if_of is not None:  # what the original began with, in its session
        return Working(run=run, version=version, earlier=whatif.history(tenant_id, run))
    if not version:  # the first step (it writes the checkpoint): fold the last completed run in
        earlier = store.sessions.earlier_history(tenant_id, run.session_id, run_id)
        return Working(run=run, version=version, earlier=earlier)
    found = store.sessions.checkpoint(tenant_id, run.session_id, run_id)
    if found is None:
        earlier, current = store.sessions.history(tenant_id, run.session_id, run_id)
    else:  # the earlier runs as this run found them, and this run's own messages
        earlier, current = found, store.sessions.run_messages(tenant_id, run.session_id, run_id)
    return Working(run=run, version=version, earlier=earlier, current=current)


def keep(tenant_id: str, working: Working, version: int) -> None:
    """Remember `working` as of the context version just written."""
    working.version = version
    with _lock:
        _cache[(tenant_id, working.run.run_id)] = working
        _cache.move_to_end((tenant_id, working.run.run_id))
        while len(_cache) > CACHED_RUNS:
            _cache.popitem(last=False)


def forget(tenant_id: str, run_id: str) -> None:
    with _lock:
        _cache.pop((tenant_id, run_id), None)

"""Lambda SnapStart for the model step: warm litellm into the snapshot, rebuild clients after a restore.

With SnapStart (python3.12+, published versions only) Lambda runs the function's init once, when a
version is published, snapshots the memory, and starts new execution environments from the snapshot.
So whatever init leaves in memory is shared by every environment restored from it, for as long as
that version lives:

- litellm's import (seconds) is worth doing at init only under SnapStart (or provisioned concurrency),
  where it happens before any request; on an on-demand cold start it costs the same in init as in
  the first call, so there it stays lazy, as everywhere else (DESIGN.md principle 7).
- Nothing at init may open a connection: a socket in the snapshot is dead after a restore, and the
  snapshot is taken without a request to serve. Importing litellm opens none as long as
  LITELLM_LOCAL_MODEL_COST_MAP is set (template.yaml sets it for every function; the model client
  sets it too); `make package VERIFY=1` checks the import with every socket refused.
- The trace provider (stepwise.core.tracing) is never built at init: its batch processor's export
  thread and the exporter's HTTP session belong to an invocation, not to a snapshot.
- After each restore, every cached client is dropped so the next use builds a new one, with fresh
  connections and the restored environment's credentials, and `random` is reseeded so two
  environments restored from one snapshot do not draw the same numbers.

`prepare(warm)` is called from the model step's handler module at import, with what that function
warms (the loop and litellm: core names neither). The runtime's `snapshot_restore_py` exists only on
Lambda; elsewhere (tests, the local stack) it does nothing.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import Any

# Inits that run ahead of any request, so time spent in them is never a caller's latency.
AHEAD_OF_REQUESTS = frozenset({"snap-start", "provisioned-concurrency"})
# litellm's lazily built clients, by the attribute name its module caches them under.
LITELLM_CLIENT_CACHE = "in_memory_llm_clients_cache"
LITELLM_MODULE_CLIENTS = ("module_level_client", "module_level_aclient")


_prepared: bool | None = None  # once per process, however many callers


def prepare(warm: Callable[[], object]) -> bool:
    """Register `after_restore` with the Lambda runtime and, when init runs ahead of requests, `warm`
    now. Returns whether the runtime's hooks were available (only on Lambda); a later call changes
    nothing and answers the same."""
    global _prepared
    if _prepared is None:
        _prepared = _register(warm)
    return _prepared


def _register(warm: Callable[[], object]) -> bool:
    try:
        from snapshot_restore_py import register_after_restore
    except ImportError:
        return False
    register_after_restore(after_restore)
    from stepwise.core import config  # only on Lambda, where init is what this decides about

    # Lambda's AWS_LAMBDA_INITIALIZATION_TYPE: "on-demand", "provisioned-concurrency" or "snap-start".
    if config.platform().initialization_type in AHEAD_OF_REQUESTS:
        warm()
    return True


def after_restore() -> None:
    """Forget everything built from the snapshot's environment; each is rebuilt on first use."""
    random.seed()  # from os.urandom: each restored environment gets its own sequence
    _reset_aws()
    _reset_pynamodb()
    _reset_litellm()


# Each looked up, not imported: what was never imported holds nothing to forget, and the handler
# module's import (this one's) stays free of boto3.
def _reset_aws() -> None:
    aws = sys.modules.get("stepwise.core.aws")
    if aws is not None:
        aws.reset()  # every boto3 client, and the session they came from


def _reset_pynamodb() -> None:
    tables = sys.modules.get("stepwise.core.tables")
    if tables is not None:
        tables.rebind()  # drops each model's cached connection (and its botocore session)


def _reset_litellm() -> None:
    litellm: Any = sys.modules.get("litellm")
    if litellm is None:
        return
    cached = vars(litellm)
    clients = cached.get(LITELLM_CLIENT_CACHE)
    if clients is not None:
        clients.flush_cache()  # the OpenAI/Anthropic SDK clients litellm keeps per provider and key
    for name in LITELLM_MODULE_CLIENTS:
        cached.pop(name, None)  # litellm's module __getattr__ builds a new one on next access

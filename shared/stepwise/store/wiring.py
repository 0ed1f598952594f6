"""The production stores: DynamoDB for the run aggregate and the ledger, S3 for results too large for a
message. Each entry point installs them once (`install()` at its import); nothing is built until a
port is first used, so a handler module that installs them stays as light as before."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepwise.runs import ports
from stepwise.runs.ports import Stores

if TYPE_CHECKING:  # the wiring stays as light as the handler modules that install it
    from stepwise.runs.models import RunEvent


class A2APushes:
    """The push notifier (stepwise.runs.ports.PushNotifier): an A2A task's new state to its push
    configs. The door's module loads only when a run with push configs appends events."""

    def notify(self, tenant_id: str, run_id: str, events: list[RunEvent], configs: dict[str, Any]) -> None:
        from stepwise.protocols import a2a

        a2a.notify(tenant_id, run_id, events, configs)


def dynamodb() -> Stores:
    """Each port's DynamoDB (or S3) module, which satisfies it structurally (mypy checks it here)."""
    from stepwise.agents import store as agents
    from stepwise.follow import delivery as followers
    from stepwise.ledger import store as effects
    from stepwise.store import (
        described,
        events,
        interactions,
        run_context,
        runs,
        sessions,
        shares,
        start_keys,
    )
    from stepwise.tools import results
    from stepwise.usage import standing

    return Stores(
        runs=runs,
        run_context=run_context,
        sessions=sessions,
        agents=agents,
        interactions=interactions,
        effects=effects,
        events=events,
        results=results,
        described=described,
        followers=followers,
        start_keys=start_keys,
        pushes=A2APushes(),
        spend=standing,
        shares=shares,
    )


def install() -> None:
    """Make these the process's stores (tests may still hand in others with `ports.using`)."""
    ports.install(dynamodb)

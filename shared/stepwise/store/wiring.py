"""The production stores: DynamoDB for the run aggregate and the ledger, S3 for results too large for a
message. Each entry point installs them once (`install()` at its import); nothing is built until a
port is first used, so a handler module that installs them stays as light as before."""

from __future__ import annotations

from stepwise.runs import ports
from stepwise.runs.ports import Stores


def dynamodb() -> Stores:
    """Each port's DynamoDB (or S3) module, which satisfies it structurally (mypy checks it here)."""
    from stepwise.agents import store as agents
    from stepwise.follow import delivery as followers
    from stepwise.ledger import store as effects
    from stepwise.store import described, events, interactions, run_context, runs, sessions
    from stepwise.tools import results

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
    )


def install() -> None:
    """Make these the process's stores (tests may still hand in others with `ports.using`)."""
    ports.install(dynamodb)

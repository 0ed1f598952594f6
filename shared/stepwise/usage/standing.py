"""Where a run stands against its budgets, read with its agent in one request.

The Step reads its agent every step; the budgets that apply (tenant, agent, the run's user) and the
tree spend of its ancestors with a `max_tokens_budget` ride in the same BatchGetItem, so checking
them adds no request per model step, only the read units of these few small items (an absent item
costs the minimum, half a unit). That is the price of not keeping a "this tenant has budgets" flag
that every budget change would have to keep right.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from stepwise.agents.models import Agent
from stepwise.core import aws, config
from stepwise.core.errors import AgentGone
from stepwise.core.schema import utcnow
from stepwise.core.tables import TREE_SEQ, tenant_key
from stepwise.runs.models import Run
from stepwise.usage import budgets as budgets_
from stepwise.usage.budgets import Budget

MAX_BATCH_ATTEMPTS = 5


@dataclass
class Standing:
    """The run's budgets (those that exist) and its ancestors' tree budgets: (run id, max tokens,
    tokens their trees have spent)."""

    budgets: list[Budget] = field(default_factory=list)
    trees: list[tuple[str, int, int]] = field(default_factory=list)


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeDeserializer

    deserializer = TypeDeserializer()
    return {name: deserializer.deserialize(value) for name, value in item.items()}


def batch_get(request: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """BatchGetItem until nothing is left unprocessed (a throttled key is retried, briefly)."""
    client = aws.client("dynamodb")
    found: dict[str, list[dict[str, Any]]] = {}
    pending = request
    for attempt in range(MAX_BATCH_ATTEMPTS):
        answer = client.batch_get_item(RequestItems=pending)
        for table, items in answer.get("Responses", {}).items():
            found.setdefault(table, []).extend(items)
        pending = answer.get("UnprocessedKeys") or {}
        if not pending:
            return found
        time.sleep(0.05 * 2**attempt)
    raise RuntimeError("DynamoDB left keys unprocessed after several attempts")


def load(tenant_id: str, run: Run) -> tuple[Agent, Standing]:
    """The run's agent (AgentGone when it was deleted) and where the run stands, in one request."""
    tables = config.tables()
    scopes = budgets_.scopes_of(run.agent_id, run.user_id)
    ancestors = [(str(t["run_id"]), int(t["max_tokens"])) for t in run.tree_budgets]
    request: dict[str, Any] = {
        tables.agents: {
            "Keys": [{"tenant_id": {"S": tenant_id}, "agent_id": {"S": run.agent_id}}],
            "ConsistentRead": True,
        },
        tables.quotas: {
            "Keys": [
                {"tenant_id": {"S": tenant_id}, "quota": {"S": budgets_.BUDGET_PREFIX + s}} for s in scopes
            ],
        },
    }
    if ancestors:
        request[tables.run_events] = {
            "Keys": [
                {"run_key": {"S": tenant_key(tenant_id, run_id)}, "seq": {"N": str(TREE_SEQ)}}
                for run_id, _ in ancestors
            ],
            "ConsistentRead": True,
        }
    found = batch_get(request)
    agents = found.get(tables.agents) or []
    if not agents:
        raise AgentGone(f"agent {run.agent_id} was deleted; the run cannot continue")
    agent = Agent.model_validate_json(_plain(agents[0])["doc"])
    now = utcnow()
    budgets = [
        b
        for b in (budgets_.from_plain(_plain(i), now) for i in found.get(tables.quotas) or [])
        if b is not None
    ]
    budgets.sort(key=lambda b: scopes.index(b.scope) if b.scope in scopes else len(scopes))
    spent = {}
    for raw in found.get(tables.run_events) or []:
        plain = _plain(raw)
        spent[str(plain["run_key"]).partition("#")[2]] = int(plain.get("tokens") or 0)
    trees = [(run_id, limit, spent.get(run_id, 0)) for run_id, limit in ancestors]
    return agent, Standing(budgets=budgets, trees=trees)

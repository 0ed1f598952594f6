"""WorkflowsTable (stepwise.core.tables.WorkflowItem): heads, versions and node records, tenant first."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pynamodb.exceptions import DoesNotExist, TransactWriteError
from pynamodb.transactions import TransactWrite

from stepwise.core import quotas, tables
from stepwise.core.errors import Conflict
from stepwise.core.tables import WorkflowItem, bind, connection

HEAD = "wf#"
NODE = "node#"
WHAT = "the workflow's definition"


def head_key(workflow_id: str) -> str:
    return f"{HEAD}{workflow_id}"


def version_key(workflow_id: str, version: int) -> str:
    return f"{HEAD}{workflow_id}#v#{version:05d}"


def node_key(run_id: str, key: str) -> str:
    return f"{NODE}{run_id}#{key}"


def create(
    tenant_id: str, workflow_id: str, head: dict[str, Any], version: dict[str, Any], at: datetime, limit: int
) -> None:
    """The head and version 1 in one transaction with the tenant's workflow count (MaxWorkflows)."""
    bind()
    head_item = WorkflowItem(
        tenant_id, head_key(workflow_id), kind="workflow", data=head, created_at=at, updated_at=at
    )
    version_item = WorkflowItem(
        tenant_id, version_key(workflow_id, 1), kind="version", data=version, created_at=at
    )
    tables.check_fits(version_item, WHAT)
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.save(head_item, condition=WorkflowItem.sk.does_not_exist())
            tx.save(version_item, condition=WorkflowItem.sk.does_not_exist())
            quotas.take(tx, tenant_id, quotas.WORKFLOWS, limit)
    except TransactWriteError as exc:
        if quotas.refused_by(exc, 2):
            raise quotas.exceeded(quotas.WORKFLOWS, limit) from exc
        raise


def publish(
    tenant_id: str, workflow_id: str, head: dict[str, Any], number: int, version: dict[str, Any], at: datetime
) -> None:
    """Version `number` and the head pointing at it, only if the head was at `number - 1` (two
    concurrent publishes cannot both take the same number: 409)."""
    bind()
    version_item = WorkflowItem(
        tenant_id, version_key(workflow_id, number), kind="version", data=version, created_at=at
    )
    tables.check_fits(version_item, WHAT)
    head_item = WorkflowItem(tenant_id, head_key(workflow_id))
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.save(version_item, condition=WorkflowItem.sk.does_not_exist())
            tx.update(
                head_item,
                actions=[WorkflowItem.data.set(head), WorkflowItem.updated_at.set(at)],
                condition=WorkflowItem.sk.exists(),
            )
    except TransactWriteError as exc:
        raise Conflict(
            "another version was published at the same time; try again", code="version_conflict"
        ) from exc


def head(tenant_id: str, workflow_id: str) -> WorkflowItem | None:
    bind()
    try:
        return WorkflowItem.get(tenant_id, head_key(workflow_id), consistent_read=True)
    except DoesNotExist:
        return None


def version(tenant_id: str, workflow_id: str, number: int) -> WorkflowItem | None:
    bind()
    try:
        return WorkflowItem.get(tenant_id, version_key(workflow_id, number))
    except DoesNotExist:
        return None


def versions(tenant_id: str, workflow_id: str) -> list[WorkflowItem]:
    bind()
    return list(WorkflowItem.query(tenant_id, WorkflowItem.sk.startswith(f"{HEAD}{workflow_id}#v#")))


def heads(tenant_id: str) -> list[WorkflowItem]:
    bind()
    return [
        i for i in WorkflowItem.query(tenant_id, WorkflowItem.sk.startswith(HEAD)) if i.kind == "workflow"
    ]


def delete(tenant_id: str, workflow_id: str) -> None:
    bind()
    with TransactWrite(connection=connection()) as tx:
        tx.delete(WorkflowItem(tenant_id, head_key(workflow_id)))
        quotas.give_back(tx, tenant_id, quotas.WORKFLOWS)
    for item in versions(tenant_id, workflow_id):
        item.delete()


def put_node(tenant_id: str, run_id: str, key: str, data: dict[str, Any], status: str, at: datetime) -> None:
    bind()
    WorkflowItem(
        tenant_id, node_key(run_id, key), kind="node", status=status, data=data, created_at=at, updated_at=at
    ).save()


def node(tenant_id: str, run_id: str, key: str) -> WorkflowItem | None:
    bind()
    try:
        return WorkflowItem.get(tenant_id, node_key(run_id, key), consistent_read=True)
    except DoesNotExist:
        return None


def set_node(tenant_id: str, run_id: str, key: str, status: str, data: dict[str, Any], at: datetime) -> None:
    bind()
    item = WorkflowItem(tenant_id, node_key(run_id, key))
    item.update(
        actions=[
            WorkflowItem.status.set(status),
            WorkflowItem.data.set(data),
            WorkflowItem.updated_at.set(at),
        ]
    )


def nodes(tenant_id: str, run_id: str) -> list[WorkflowItem]:
    bind()
    return list(WorkflowItem.query(tenant_id, WorkflowItem.sk.startswith(f"{NODE}{run_id}#")))

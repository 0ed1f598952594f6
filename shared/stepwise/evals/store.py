"""EvalsTable: a tenant's suites and eval runs, tenant first (pk tenant_id). A suite is
sk = "suite#<eval_id>", its eval runs sk = "run#<eval_id>#<eval_run_id>": one query lists a tenant's
suites (begins_with "suite#"), one lists a suite's eval runs, newest first (eval run ids are ULIDs)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pynamodb.exceptions import DoesNotExist

from stepwise.core import tables
from stepwise.core.tables import EvalItem, bind

SUITE = "suite#"
RUN = "run#"
WHAT = "the eval suite (its cases and assertions together)"
RUN_WHAT = "the eval run (its cases' results together)"


def _suite_key(eval_id: str) -> str:
    return f"{SUITE}{eval_id}"


def run_key(eval_id: str, eval_run_id: str) -> str:
    return f"{RUN}{eval_id}#{eval_run_id}"


def put_suite(tenant_id: str, eval_id: str, data: dict[str, Any], created_at: datetime) -> None:
    bind()
    item = EvalItem(
        tenant_id, _suite_key(eval_id), eval_id=eval_id, kind="suite", data=data, created_at=created_at
    )
    tables.check_fits(item, WHAT)  # 413 item_too_large, never DynamoDB's ValidationException
    item.save()


def get_suite(tenant_id: str, eval_id: str) -> dict[str, Any] | None:
    bind()
    try:
        item = EvalItem.get(tenant_id, _suite_key(eval_id))
    except DoesNotExist:
        return None
    return dict(item.data)


def list_suites(tenant_id: str) -> list[dict[str, Any]]:
    bind()
    return [dict(item.data) for item in EvalItem.query(tenant_id, EvalItem.sk.startswith(SUITE))]


def put_run(
    tenant_id: str, eval_id: str, eval_run_id: str, data: dict[str, Any], created_at: datetime
) -> None:
    """A new eval run, running."""
    bind()
    item = EvalItem(
        tenant_id,
        run_key(eval_id, eval_run_id),
        eval_id=eval_id,
        kind="run",
        status="running",
        done=0,
        data=data,
        created_at=created_at,
    )
    tables.check_fits(item, RUN_WHAT)
    item.save(condition=EvalItem.sk.does_not_exist())


def get_run(tenant_id: str, eval_id: str, eval_run_id: str) -> EvalItem | None:
    bind()
    try:
        return EvalItem.get(tenant_id, run_key(eval_id, eval_run_id))
    except DoesNotExist:
        return None


def list_runs(tenant_id: str, eval_id: str, limit: int = 50) -> list[EvalItem]:
    """The suite's eval runs, newest first."""
    bind()
    return list(
        EvalItem.query(
            tenant_id, EvalItem.sk.startswith(f"{RUN}{eval_id}#"), scan_index_forward=False, limit=limit
        )
    )


def case_done(tenant_id: str, eval_id: str, eval_run_id: str) -> int:
    """One more of the eval run's cases has ended: the count now."""
    bind()
    item = EvalItem(tenant_id, run_key(eval_id, eval_run_id))
    item.update(actions=[EvalItem.done.add(1)], condition=EvalItem.sk.exists())
    return int(item.done)


def finish(
    tenant_id: str, eval_id: str, eval_run_id: str, status: str, data: dict[str, Any], finished_at: datetime
) -> bool:
    """Write the eval run's result, once: False when it had ended already (a retried Score)."""
    bind()
    item = EvalItem(tenant_id, run_key(eval_id, eval_run_id))
    from pynamodb.exceptions import UpdateError

    try:
        item.update(
            actions=[
                EvalItem.status.set(status),
                EvalItem.data.set(data),
                EvalItem.finished_at.set(finished_at),
            ],
            condition=EvalItem.status == "running",
        )
    except UpdateError as exc:
        if exc.cause_response_code == "ConditionalCheckFailedException":
            return False
        raise
    return True

"""Run records: written before their execution starts, then moved through their statuses with
conditional updates so a retried or late step can never resurrect a finished run."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import Any

from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action
from pynamodb.transactions import TransactWrite

from stepwise.attachments.models import Attachment
from stepwise.core import config, quotas, safejson, tables
from stepwise.core.errors import Malformed, NotFound
from stepwise.core.schema import utcnow
from stepwise.core.tables import (
    RunContextItem,
    RunItem,
    bind,
    condition_failed,
    connection,
    same_tenant,
    tenant_key,
)
from stepwise.llm.models import ScriptTurn, Usage
from stepwise.runs.listing import NO_FILTER, RunFilter, trigger_prefix
from stepwise.runs.models import (
    ACTIVE_STATUSES,
    PREFIXED_TRIGGERS,
    TERMINAL_STATUSES,
    Run,
    RunError,
    RunExists,
    RunStatus,
)
from stepwise.store import run_context
from stepwise.webhooks.models import RunTarget, WebhookConfig

PAGE_LIMIT = 50


def _to_model(item: RunItem) -> Run:
    return Run(
        run_id=item.run_id,
        agent_id=item.agent_id,
        session_id=item.session_id,
        user_id=item.user_id,
        status=item.status,
        input=item.input,
        output=item.output,
        error=RunError.model_validate(item.error) if item.error else None,
        steps=int(item.steps),
        max_steps=int(item.max_steps),
        max_tokens_budget=int(item.max_tokens_budget) if item.max_tokens_budget is not None else None,
        compaction_failures=int(item.compaction_failures or 0),
        usage=Usage(
            input_tokens=int(item.input_tokens),
            output_tokens=int(item.output_tokens),
            cached_tokens=int(item.cached_tokens),
            cache_write_tokens=int(item.cache_write_tokens or 0),
            cost_usd=float(item.cost_usd) if item.cost_usd is not None else None,
        ),
        tools_executed=list(item.tools_executed) if item.tools_executed is not None else None,
        replay_of=item.replay_of,
        trigger_id=item.trigger_id or item.run_id,
        metadata=item.metadata or {},
        script=[ScriptTurn.model_validate(t) for t in item.script] if item.script else None,
        instructions=item.instructions,
        webhook=WebhookConfig.model_validate(item.webhook) if item.webhook else None,
        attachments=[Attachment.model_validate(a) for a in item.attachments or []],
        attachments_erased_at=item.attachments_erased_at,
        created_at=item.created_at,
        finished_at=item.finished_at,
        parent_run_id=item.parent_run_id,
        root_run_id=item.root_run_id,
        depth=int(item.depth or 0),
        parent_interaction_id=item.parent_interaction_id,
        root_session_id=item.root_session_id,
        children=list(item.children or []),
        descendants_usage=Usage.model_validate(item.descendants_usage or {}),
        client_tools=list(item.client_tools or []),
        what_if_of=item.what_if_of,
        what_if=item.what_if,
        what_if_calls=dict(item.what_if_calls or {}),
        callback_token=item.callback_token,
        tree_budgets=list(item.tree_budgets or []),
        response_format=item.response_format,
    )


RUN = "the run (its message, metadata and script together)"


def _new_item(tenant_id: str, run: Run) -> RunItem:
    # No bind(): building and measuring an item touches no table (the fakes measure runs with it).
    return RunItem(
        tenant_id,
        run.run_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        user_id=run.user_id,
        agent_key=tenant_key(tenant_id, run.agent_id),
        session_key=tenant_key(tenant_id, run.session_id),
        status=run.status,
        input=run.input,
        max_steps=run.max_steps,
        max_tokens_budget=run.max_tokens_budget,
        tools_executed=run.tools_executed,
        cost_usd=run.usage.cost_usd,
        replay_of=run.replay_of,
        trigger_id=run.trigger_id or run.run_id,
        metadata=run.metadata,
        script=[t.model_dump(exclude_none=True) for t in run.script] if run.script else None,
        instructions=run.instructions,
        webhook=run.webhook.model_dump(mode="json") if run.webhook else None,
        attachments=[a.model_dump() for a in run.attachments] or None,
        created_at=run.created_at,
        parent_run_id=run.parent_run_id,
        root_run_id=run.root_run_id,
        depth=run.depth or None,
        parent_interaction_id=run.parent_interaction_id,
        root_session_id=run.root_session_id,
        client_tools=run.client_tools or None,
        what_if_of=run.what_if_of,
        what_if=run.what_if,
        callback_token=run.callback_token,
        tree_budgets=run.tree_budgets or None,
        response_format=run.response_format,
    )


def check_fits(tenant_id: str, run: Run) -> None:
    """413 `item_too_large` for a run DynamoDB could not store: for callers to ask before they write
    anything else for it (its session)."""
    tables.check_fits(_new_item(tenant_id, run), RUN)


def create(tenant_id: str, run: Run) -> Run:
    item = _new_item(tenant_id, run)
    tables.check_fits(item, RUN)
    # A new run is active (queued): it takes one of the tenant's active-run slots in the same write.
    limit = config.quotas().max_active_runs
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.save(item, condition=RunItem.run_id.does_not_exist())
            quotas.take(tx, tenant_id, quotas.ACTIVE_RUNS, limit)
    except TransactWriteError as exc:
        if quotas.refused_by(exc, 0):
            raise RunExists(f"run {run.run_id} exists already", code="run_exists") from exc
        if quotas.refused_by(exc, 1):
            raise quotas.exceeded(quotas.ACTIVE_RUNS, limit) from exc
        raise
    return run


def delete(tenant_id: str, run_id: str) -> None:
    """Only for a run whose start was refused before it began (nothing else references it); its
    active-run slot is given back with it."""
    bind()
    with TransactWrite(connection=connection()) as tx:
        tx.delete(RunItem(tenant_id, run_id), condition=RunItem.status == "queued")
        quotas.give_back(tx, tenant_id, quotas.ACTIVE_RUNS)


def exists(tenant_id: str, run_id: str) -> bool:
    bind()
    return RunItem.count(tenant_id, RunItem.run_id == run_id, consistent_read=True) > 0


def _item(tenant_id: str, run_id: str) -> RunItem:
    bind()
    try:
        return RunItem.get(tenant_id, run_id, consistent_read=True)
    except DoesNotExist:
        raise NotFound(f"run {run_id} not found", code="run_not_found") from None


def _with_context(run: Run, context: run_context.RunContext | None) -> Run:
    """An active run's counters live in its context (written every step); the run item gets them
    when the run ends."""
    if run.done or context is None:
        return run
    return run.model_copy(
        update={
            "steps": context.steps,
            "usage": context.usage,
            "children": list(context.children),
            "descendants_usage": context.descendants_usage,
            "tools_executed": list(context.tools_executed),
            "compaction_failures": context.compaction_failures,
            "what_if_calls": dict(context.what_if_calls),
        }
    )


def get(tenant_id: str, run_id: str) -> Run:
    run = _to_model(_item(tenant_id, run_id))
    return run if run.done else _with_context(run, run_context.peek(tenant_id, run_id))


def target(tenant_id: str, run_id: str) -> RunTarget:
    """What a webhook delivery needs of the run, in one small read (not its input or script)."""
    bind()
    try:
        item = RunItem.get(
            tenant_id,
            run_id,
            consistent_read=True,
            attributes_to_get=["run_id", "agent_id", "session_id", "metadata", "webhook"],
        )
    except DoesNotExist:
        raise NotFound(f"run {run_id} not found", code="run_not_found") from None
    return RunTarget(
        run_id=item.run_id,
        agent_id=item.agent_id,
        session_id=item.session_id,
        metadata=item.metadata or {},
        webhook=WebhookConfig.model_validate(item.webhook) if item.webhook else None,
    )


def _with_contexts(tenant_id: str, found: list[Run]) -> list[Run]:
    active = [r.run_id for r in found if not r.done]
    if not active:
        return found
    keys = [(tenant_key(tenant_id, run_id), run_context.CONTEXT_SEQ) for run_id in active]
    contexts = {
        item.run_key.split("#", 1)[1]: run_context.RunContext.model_validate(item.context or {})
        for item in RunContextItem.batch_get(keys)
    }
    return [_with_context(r, contexts.get(r.run_id)) for r in found]


def _encode_token(key: dict[str, Any] | None) -> str | None:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode() if key else None


def _decode_token(token: str | None, expected: dict[str, str]) -> dict[str, Any] | None:
    """The start key a token carries, only if it is exactly the key this listing issues: the same
    attributes, with this tenant's values. Anything else is refused before DynamoDB sees it."""
    if not token:
        return None
    forged = Malformed("next_token is not one this API issued", code="invalid_next_token")
    try:
        key = safejson.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, UnicodeDecodeError) as exc:
        raise forged from exc
    if not isinstance(key, dict) or set(key) != {*expected, "run_id"}:
        raise forged
    values = {name: value.get("S") if isinstance(value, dict) else None for name, value in key.items()}
    if not isinstance(values["run_id"], str) or any(values[n] != v for n, v in expected.items()):
        raise forged
    return key


# A filtered listing (a status, or an agent within a session) fills its page from bounded reads:
# DynamoDB's Limit counts the runs read, not the ones that match, so one query per page would give short
# or empty pages. At most FILTER_READS queries of FILTER_PAGE runs each per page (1,000 runs, about as
# many RCUs as those items' size in 8 KiB units, eventually consistent reads).
FILTER_PAGE = 100
FILTER_READS = 10


def list_runs(
    tenant_id: str,
    *,
    agent_id: str | None = None,
    session_id: str | None = None,
    status: RunStatus | None = None,
    limit: int = PAGE_LIMIT,
    next_token: str | None = None,
    where: RunFilter = NO_FILTER,
) -> tuple[list[Run], str | None]:
    """Newest first. The token is DynamoDB's LastEvaluatedKey. The time window is a key condition on
    the run id (stepwise.runs.listing); the status, user, trigger (and, with both a session and an
    agent, the agent) are filters, applied together. A filtered page holds up to `limit` runs, read in
    bounded steps (`_filled`): its token is set when another match exists, or when the read budget ran
    out first (the next page goes on from there)."""
    bind()
    expected = {"tenant_id": tenant_id}  # a page of an index also carries the index's key
    if session_id:
        expected["session_key"] = tenant_key(tenant_id, session_id)
    elif agent_id:
        expected["agent_key"] = tenant_key(tenant_id, agent_id)
    start = _decode_token(next_token, expected)
    id_range = where.id_range()
    if id_range is None:
        return [], None
    key_condition = _id_condition(*id_range)
    condition = _filter(status, where)
    if session_id and agent_id:
        by_agent = RunItem.agent_key == tenant_key(tenant_id, agent_id)
        condition = by_agent if condition is None else condition & by_agent

    def query(**args: Any) -> Any:
        if session_id:
            return RunItem.by_session.query(tenant_key(tenant_id, session_id), key_condition, **args)
        if agent_id:
            return RunItem.by_agent.query(tenant_key(tenant_id, agent_id), key_condition, **args)
        return RunItem.query(tenant_id, key_condition, **args)

    if condition is None:
        result = query(scan_index_forward=False, limit=limit, last_evaluated_key=start)
        items, last_key = list(result), result.last_evaluated_key
    else:
        items, last_key = _filled(query, condition, limit, start)
    runs = _with_contexts(tenant_id, [_to_model(item) for item in same_tenant(items, tenant_id)])
    return runs, _encode_token(last_key)


def _filled(
    query: Any, condition: Any, limit: int, start: dict[str, Any] | None
) -> tuple[list[RunItem], dict[str, Any] | None]:
    """Up to `limit` matches, newest first, from at most FILTER_READS queries, and the key to go on
    from: the last one listed when another match was seen (one more is read to know), None when the
    runs ran out, DynamoDB's last key when the budget did."""
    pages = query(
        scan_index_forward=False,
        filter_condition=condition,
        page_size=FILTER_PAGE,
        last_evaluated_key=start,
    ).page_iter
    found: list[tuple[RunItem, dict[str, Any]]] = []
    for read, page in enumerate(pages, start=1):
        for raw in page.get("Items", []):
            if len(found) == limit:  # another match: the page ends at the last one listed
                return [item for item, _ in found], found[-1][1]
            found.append((RunItem.from_raw_data(raw), {name: raw[name] for name in pages.key_names}))
        if read >= FILTER_READS:
            break
    return [item for item, _ in found], pages.last_evaluated_key


def _id_condition(low: str | None, high: str | None) -> Condition | None:
    if low is not None and high is not None:
        return RunItem.run_id.between(low, high)
    if low is not None:
        return RunItem.run_id >= low
    return RunItem.run_id <= high if high is not None else None


def _filter(status: RunStatus | None, where: RunFilter) -> Condition | None:
    conditions: list[Condition] = []
    if status:
        conditions.append(RunItem.status == status)
    if where.user_id:
        conditions.append(RunItem.user_id == where.user_id)
    if where.trigger:
        prefix = trigger_prefix(where.trigger)
        if prefix is not None:
            conditions.append(RunItem.trigger_id.startswith(prefix))
        else:  # "api": a trigger id with none of the other kinds' prefixes (or none at all)
            for other in PREFIXED_TRIGGERS:
                conditions.append(~RunItem.trigger_id.startswith(f"{other}:"))
    if not conditions:
        return None
    combined = conditions[0]
    for condition in conditions[1:]:
        combined &= condition
    return combined


def erase_attachments(tenant_id: str, run_id: str) -> bool:
    """Forget a finished run's files: the list goes (names are the user's data too) and the time of
    the erasure stays, so a replay knows its input is gone. False when the run is still active."""
    bind()
    condition = RunItem.run_id.exists() & RunItem.status.is_in(*sorted(TERMINAL_STATUSES))
    try:
        RunItem(tenant_id, run_id).update(
            actions=[RunItem.attachments.remove(), RunItem.attachments_erased_at.set(utcnow())],
            condition=condition,
        )
    except UpdateError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def active_before(cutoff: datetime) -> Iterator[tuple[str, Run]]:
    """(tenant_id, run) for every tenant's run still queued, running or waiting that was created before
    `cutoff`. A Scan of the whole table, for the reconciler's sweep only (stepwise.runs.reconcile
    says why)."""
    bind()
    condition = RunItem.status.is_in(*sorted(ACTIVE_STATUSES)) & (RunItem.created_at < cutoff)
    for item in RunItem.scan(filter_condition=condition):
        yield item.tenant_id, _to_model(item)


def transition(
    tenant_id: str, run_id: str, to: RunStatus, *, allowed_from: AbstractSet[str], **fields: Any
) -> bool:
    """Move a run to `to` if it is in one of `allowed_from`; False when it is not (a late or repeated
    step). Extra fields are set in the same write."""
    bind()
    item = RunItem(tenant_id, run_id)
    actions: list[Action] = [RunItem.status.set(to)]
    for name, value in fields.items():
        attr = getattr(RunItem, name)
        actions.append(attr.remove() if value is None else attr.set(value))
    condition = RunItem.run_id.exists() & RunItem.status.is_in(*allowed_from)
    if to not in TERMINAL_STATUSES:
        try:
            item.update(actions=actions, condition=condition)
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True
    actions.append(RunItem.finished_at.set(utcnow()))
    if not set(allowed_from) <= ACTIVE_STATUSES:
        raise ValueError("a terminal transition starts from active statuses only (it frees a quota slot)")
    # The run leaves the active set: its slot is given back in the same write, exactly once (only the
    # transition that wins the condition commits).
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.update(item, actions=actions, condition=condition)
            quotas.give_back(tx, tenant_id, quotas.ACTIVE_RUNS)
    except TransactWriteError as exc:
        if quotas.refused_by(exc, 0):
            return False
        raise
    return True


def add_usage(tenant_id: str, run_id: str, usage: Usage, lines: list[dict[str, Any]]) -> bool:
    """Add what a late model call spent to an ended run's counters (ADD: no read, and no race with
    another late addition), counting its usage lines in the same transaction, as the context write it
    missed would have. False when the run is gone or not ended (its context still counts for it)."""
    bind()
    actions: list[Action] = [
        RunItem.input_tokens.add(usage.input_tokens),
        RunItem.output_tokens.add(usage.output_tokens),
        RunItem.cached_tokens.add(usage.cached_tokens),
        RunItem.cache_write_tokens.add(usage.cache_write_tokens),
    ]
    if usage.cost_usd is None:  # an unpriced call: the run's total is no longer known
        actions.append(RunItem.cost_usd.remove())
    elif usage.cost_usd:
        actions.append(RunItem.cost_usd.add(usage.cost_usd))
    condition = RunItem.run_id.exists() & RunItem.status.is_in(*TERMINAL_STATUSES)
    item = RunItem(tenant_id, run_id)
    from stepwise.usage import counters

    # A transaction even without lines: botocore gives it a ClientRequestToken, so a retry of a write
    # that was applied (its answer lost) is not added twice, as a plain ADD would be.
    try:
        with TransactWrite(connection=connection()) as tx:
            tx.update(item, actions=actions, condition=condition)
            if lines:
                counters.count(tx, tenant_id, lines)
    except TransactWriteError as exc:
        if quotas.refused_by(exc, 0):
            return False
        raise
    return True


def add_descendants_usage(tenant_id: str, run_id: str, usage: Usage, *, key: str) -> bool:
    """Add to an ended run's `descendants_usage` (a JSON attribute: read, then written on condition
    that it is unchanged, again on a lost race), once per `key`: the key joins `descendants_counted`
    in the same write, so a retry whose first write was applied (its answer lost), or a report sent
    again, adds nothing. False when the run is gone or still active: an active run's counters are its
    context's, which only its own Steps write."""
    bind()
    for _ in range(8):
        try:
            item = RunItem.get(
                tenant_id,
                run_id,
                consistent_read=True,
                attributes_to_get=["status", "descendants_usage", "descendants_counted"],
            )
        except DoesNotExist:
            return False
        if item.status not in TERMINAL_STATUSES:
            return False
        if key in (item.descendants_counted or set()):
            return True  # this addition is there already
        before = item.descendants_usage
        after = (Usage.model_validate(before or {}) + usage).model_dump(mode="json")
        condition = RunItem.status.is_in(*TERMINAL_STATUSES) & (
            RunItem.descendants_usage.does_not_exist()
            if before is None
            else RunItem.descendants_usage == before
        )
        try:
            RunItem(tenant_id, run_id).update(
                actions=[RunItem.descendants_usage.set(after), RunItem.descendants_counted.add({key})],
                condition=condition,
            )
        except UpdateError as exc:
            if condition_failed(exc):
                continue  # another addition won, or this one was applied: read it again
            raise
        return True
    raise RuntimeError(f"run {run_id}: descendants_usage kept changing under eight additions")

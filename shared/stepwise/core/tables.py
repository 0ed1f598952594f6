"""The pynamodb models, one per table of template.yaml (names and keys must match it), and what every
adapter shares: binding them to the tables the environment names, tenant keys, write conditions and
item sizes. They sit in core, beside the configuration that names the tables, so each feature's
adapter (stepwise.<feature>.store) and the run aggregate's (stepwise.store) stand on them alike.

Table names come from the environment at first use, not at import, so the local stack and tests can
set the environment after importing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cache
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from pynamodb.attributes import (
    BinaryAttribute,
    BooleanAttribute,
    JSONAttribute,
    ListAttribute,
    NumberAttribute,
    TTLAttribute,
    UnicodeAttribute,
    UnicodeSetAttribute,
    UTCDateTimeAttribute,
    VersionAttribute,
)
from pynamodb.connection import Connection
from pynamodb.exceptions import PynamoDBException
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from stepwise.core import config
from stepwise.core.errors import PayloadTooLarge
from stepwise.core.ids import valid_tenant

logger = Logger(service="stepwise")


def tenant_key(tenant_id: str, ident: str) -> str:
    """A partition key scoped to a tenant. The tenant id is checked here, where keys are made: with no
    "#" in it, the first "#" of a key ends its tenant, so no tenant's key can spell another's."""
    return f"{valid_tenant(tenant_id)}#{ident}"


class ApiKeyItem(Model):
    class Meta:
        table_name = "ApiKeysTable"

    key_hash = UnicodeAttribute(hash_key=True)
    tenant_id = UnicodeAttribute()
    key_prefix = UnicodeAttribute()
    created_at = UTCDateTimeAttribute()
    name = UnicodeAttribute(null=True)  # what a person called it; records say who acted by it
    revoked_at = UTCDateTimeAttribute(null=True)


class AgentsByA2A(GlobalSecondaryIndex["AgentItem"]):
    """Sparse: only agents whose A2A door is open carry `a2a_id`. The public agent card has no API key,
    so this is how it finds the agent's tenant from the agent id alone."""

    class Meta:
        index_name = "by_a2a"
        projection = KeysOnlyProjection()

    a2a_id = UnicodeAttribute(hash_key=True)


class AgentItem(Model):
    class Meta:
        table_name = "AgentsTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    agent_id = UnicodeAttribute(range_key=True)
    doc = JSONAttribute()  # the Agent model, validated by pydantic on the way in and out
    version = VersionAttribute()  # optimistic locking: two concurrent edits cannot both win
    a2a_id = UnicodeAttribute(null=True)  # the agent id while `a2a.enabled`, else absent (by_a2a)

    by_a2a = AgentsByA2A()


class SessionItem(Model):
    """The session shell (sk = "session"), its messages (sk = "msg#<run_id>#<step>#<slot>") and, per
    run, the history of the earlier runs as that run began (sk = "ckpt#<run_id>", in `messages`), and the
    whole of each tool result the model read as a description (sk = "result#<tool_call_id>", in `result`)."""

    class Meta:
        table_name = "SessionsTable"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    agent_id = UnicodeAttribute(null=True)
    user_id = UnicodeAttribute(null=True)
    created_at = UTCDateTimeAttribute(null=True)
    completed_runs = ListAttribute(of=UnicodeAttribute, null=True)
    # Double texting: at most one active run per session; later ones wait in `queue`, in order.
    active_run_id = UnicodeAttribute(null=True)
    queue = ListAttribute(of=UnicodeAttribute, null=True)
    run_id = UnicodeAttribute(null=True)
    message = JSONAttribute(null=True)
    messages = JSONAttribute(null=True)
    result = JSONAttribute(null=True)  # {"text": ...} inline, or {"stored": true} when the text is in S3
    expires_at = TTLAttribute(null=True)


class RunsByAgent(GlobalSecondaryIndex["RunItem"]):
    class Meta:
        index_name = "by_agent"
        projection = AllProjection()

    agent_key = UnicodeAttribute(hash_key=True)
    run_id = UnicodeAttribute(range_key=True)


class RunsBySession(GlobalSecondaryIndex["RunItem"]):
    class Meta:
        index_name = "by_session"
        projection = AllProjection()

    session_key = UnicodeAttribute(hash_key=True)
    run_id = UnicodeAttribute(range_key=True)


class RunItem(Model):
    class Meta:
        table_name = "RunsTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    run_id = UnicodeAttribute(range_key=True)
    agent_id = UnicodeAttribute()
    session_id = UnicodeAttribute()
    user_id = UnicodeAttribute(null=True)
    agent_key = UnicodeAttribute()
    session_key = UnicodeAttribute()
    status = UnicodeAttribute()
    input = UnicodeAttribute()
    output = UnicodeAttribute(null=True)
    error = JSONAttribute(null=True)
    steps = NumberAttribute(default=0)
    max_steps = NumberAttribute()
    max_tokens_budget = NumberAttribute(null=True)
    compaction_failures = NumberAttribute(default=0)
    input_tokens = NumberAttribute(default=0)
    output_tokens = NumberAttribute(default=0)
    cached_tokens = NumberAttribute(default=0)
    cache_write_tokens = NumberAttribute(default=0)
    cost_usd = NumberAttribute(null=True)  # absent: no known price (or recorded before costs were)
    # Absent means unknown; an empty list means checked and none. Appended before each tool runs.
    tools_executed = ListAttribute(of=UnicodeAttribute, null=True)
    parent_run_id = UnicodeAttribute(null=True)
    root_run_id = UnicodeAttribute(null=True)
    depth = NumberAttribute(null=True)
    parent_interaction_id = UnicodeAttribute(null=True)
    root_session_id = UnicodeAttribute(null=True)
    children = ListAttribute(of=UnicodeAttribute, null=True)
    descendants_usage = JSONAttribute(null=True)
    descendants_counted = UnicodeSetAttribute(null=True)  # the keys of the additions to it
    replay_of = UnicodeAttribute(null=True)
    trigger_id = UnicodeAttribute(null=True)
    metadata = JSONAttribute(null=True)
    script = JSONAttribute(null=True)
    instructions = UnicodeAttribute(null=True)  # a door's addition to the system prompt, this run only
    webhook = JSONAttribute(null=True)  # the webhook that applies to the run: its own, else its agent's
    attachments = JSONAttribute(null=True)  # [{attachment_id, name, content_type, size, sha256}]
    attachments_erased_at = UTCDateTimeAttribute(null=True)
    client_tools = JSONAttribute(null=True)  # the run's own client tools (a door's caller brings them)
    what_if_of = UnicodeAttribute(null=True)  # a what-if run's original
    what_if = JSONAttribute(null=True)  # its request (overrides, match, live_reads, the original's session)
    what_if_calls = JSONAttribute(null=True)  # {call id: served:<id> | live | diverged:<code>}, at its end
    # A task token the run's ending sends back (an eval case: the EvalRun execution waits on it).
    callback_token = UnicodeAttribute(null=True)
    tree_budgets = JSONAttribute(null=True)  # ancestors' max_tokens_budget this run counts against
    response_format = JSONAttribute(null=True)  # a workflow node's output_schema, for the model's answer
    created_at = UTCDateTimeAttribute()
    finished_at = UTCDateTimeAttribute(null=True)

    by_agent = RunsByAgent()
    by_session = RunsBySession()


HEAD_SEQ = 0  # the head item's place in a run's event log; events start at seq 1
CONTEXT_SEQ = -1  # the run's context, before the head


class RunEventItem(Model):
    class Meta:
        table_name = "RunEventsTable"

    run_key = UnicodeAttribute(hash_key=True)
    seq = NumberAttribute(range_key=True)
    type = UnicodeAttribute()
    data = JSONAttribute()
    at = UTCDateTimeAttribute()
    expires_at = TTLAttribute(null=True)


class RunHeadItem(Model):
    """Seq 0 of a run's event log: the sequence counter writers reserve on and readers poll. A few
    dozen bytes, so polling it is the cheapest read there is, and it carries no index to multiply
    each reservation (the run item carries two)."""

    class Meta:
        table_name = "RunEventsTable"

    run_key = UnicodeAttribute(hash_key=True)
    seq = NumberAttribute(range_key=True)  # always HEAD_SEQ
    last_seq = NumberAttribute(default=0)  # the last sequence number handed out
    done = BooleanAttribute(default=False)  # the last event handed out is terminal
    moved_at = UTCDateTimeAttribute(null=True)  # when last_seq last moved
    reservation = UnicodeAttribute(null=True)  # the token of the last reservation (store.events.append)
    # The reservation before it, and the last_seq it ended at: a writer whose answer was lost finds its
    # range here when one other writer reserved after it.
    previous_reservation = UnicodeAttribute(null=True)
    previous_last_seq = NumberAttribute(null=True)
    # How many followers ever connected: a writer whose reservation finds none skips looking for them
    # (stepwise.follow.delivery explains why no event is missed).
    followers = NumberAttribute(null=True)
    # A2A push notification configs of the run's task (stepwise.protocols.a2a), by config id. On the
    # head because every append already returns it: a run without configs pays nothing to be checked.
    push = JSONAttribute(null=True)
    push_rev = NumberAttribute(null=True)  # a config change is conditional on it: none is lost
    expires_at = TTLAttribute(null=True)


class RunContextItem(Model):
    """Seq -1 of a run's event log, before its head: the run's context, which every Step reads once
    and writes once or twice (stepwise.store.run_context). Beside the log for the same reason as the
    head, but apart from it: the context grows with the run's calls (up to a few KB) and the head is
    written for every event, so keeping the head tiny keeps each reservation at one write unit.
    `version` orders the Step's writes; `ended` is set by the run's ending."""

    class Meta:
        table_name = "RunEventsTable"

    run_key = UnicodeAttribute(hash_key=True)
    seq = NumberAttribute(range_key=True)  # always CONTEXT_SEQ
    version = NumberAttribute(default=0)
    ended = BooleanAttribute(null=True)
    context = JSONAttribute(null=True)
    expires_at = TTLAttribute(null=True)


TREE_SEQ = -2  # a run's tree spend: its own and its descendants' tokens, for its max_tokens_budget


class TreeSpendItem(Model):
    """Seq -2 of a run's event log: the tokens its tree has spent (its own model calls, once it may
    delegate, and every descendant's), ADDed in each spender's usage transaction, so a child checks
    its ancestors' `max_tokens_budget` before each model call (stepwise.usage.budgets)."""

    class Meta:
        table_name = "RunEventsTable"

    run_key = UnicodeAttribute(hash_key=True)
    seq = NumberAttribute(range_key=True)  # always TREE_SEQ
    tokens = NumberAttribute(default=0)
    expires_at = TTLAttribute(null=True)


class FollowerItem(Model):
    """A run's live followers (sk = the WebSocket connection id) and the follow URLs already used
    (sk = "token#<nonce>"), both short-lived (TTL)."""

    class Meta:
        table_name = "FollowersTable"

    run_key = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    sent = NumberAttribute(null=True)  # the last seq this connection was sent
    lease = NumberAttribute(null=True)  # epoch seconds until which one writer alone may send to it
    connected_at = UTCDateTimeAttribute(null=True)
    expires_at = TTLAttribute(null=True)


class InteractionsBySession(GlobalSecondaryIndex["InteractionItem"]):
    class Meta:
        index_name = "by_session"
        projection = AllProjection()

    session_key = UnicodeAttribute(hash_key=True)
    interaction_id = UnicodeAttribute(range_key=True)


class InteractionsByRun(GlobalSecondaryIndex["InteractionItem"]):
    class Meta:
        index_name = "by_run"
        projection = AllProjection()

    run_key = UnicodeAttribute(hash_key=True)
    interaction_id = UnicodeAttribute(range_key=True)


class InteractionItem(Model):
    """A pause of a run: an approval, a client tool or a delegation, with the task token that resumes it."""

    class Meta:
        table_name = "InteractionsTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    interaction_id = UnicodeAttribute(range_key=True)
    session_key = UnicodeAttribute()
    run_key = UnicodeAttribute()
    run_id = UnicodeAttribute()
    session_id = UnicodeAttribute()
    agent_id = UnicodeAttribute()
    kind = UnicodeAttribute()  # approval | client_tool | delegation
    status = UnicodeAttribute()  # pending | answered | expired
    step = NumberAttribute()
    tool_call_id = UnicodeAttribute()
    tool_call_index = NumberAttribute()
    tool_name = UnicodeAttribute()
    arguments = JSONAttribute()
    digest = UnicodeAttribute()  # binds an approval to exactly these arguments, this tool and tenant
    timeout_seconds = NumberAttribute()
    channels = JSONAttribute(null=True)
    task_token = UnicodeAttribute(null=True)  # never leaves the server
    answer = JSONAttribute(null=True)
    answer_key = UnicodeAttribute(null=True)  # the Idempotency-Key the answer came with
    answered_by = UnicodeAttribute(null=True)
    answered_at = UTCDateTimeAttribute(null=True)
    answer_write = UnicodeAttribute(null=True)  # the token of the write that answered (store.interactions)
    delivered = NumberAttribute(default=0)  # 1 once Step Functions has the answer
    created_at = UTCDateTimeAttribute()
    deadline = UTCDateTimeAttribute()

    by_session = InteractionsBySession()
    by_run = InteractionsByRun()


class ScheduleItem(Model):
    """A tenant's schedule; EventBridge Scheduler holds its twin (named after schedule_id) that fires it."""

    class Meta:
        table_name = "SchedulesTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    schedule_id = UnicodeAttribute(range_key=True)
    agent_id = UnicodeAttribute()
    expression = UnicodeAttribute()
    timezone = UnicodeAttribute()
    message = UnicodeAttribute()
    enabled = BooleanAttribute()
    created_at = UTCDateTimeAttribute()


class EffectItem(Model):
    """An entry of the effects ledger (stepwise.ledger): one effect key, its claim, outcome and history."""

    class Meta:
        table_name = "EffectsTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    effect_key = UnicodeAttribute(range_key=True)  # "effect#<sha256>" (stable intent) or "call#<sha256>"
    kind = UnicodeAttribute()
    tool_name = UnicodeAttribute()
    intent = JSONAttribute(null=True)  # what the key's digest is over
    status = UnicodeAttribute()  # claimed | done | unknown | undone | released
    generation = NumberAttribute()  # one more with every claim
    run_id = UnicodeAttribute()
    tool_call_id = UnicodeAttribute()
    claimed_at = UTCDateTimeAttribute()
    settled_at = UTCDateTimeAttribute(null=True)
    result = JSONAttribute(null=True)
    result_truncated = BooleanAttribute(null=True)
    undone_at = UTCDateTimeAttribute(null=True)
    undone_by = UnicodeAttribute(null=True)
    history = JSONAttribute(null=True)  # earlier generations, newest last
    # "call" entries expire with the run's events, "effect" entries after EffectsTtlDays (older items
    # written before that have none, and are kept)
    expires_at = TTLAttribute(null=True)
    arguments = JSONAttribute(null=True)  # the current generation's call, masked, for whoever resolves it
    resolution = JSONAttribute(null=True)  # a person's word on it: {outcome, by, at, note, was}


class SettingItem(Model):
    """A tenant's setting (a secret such as EXA_API_KEY): only its KMS ciphertext is stored, encrypted
    under the context {tenant_id, key} so it cannot be replayed under another tenant or name."""

    class Meta:
        table_name = "SettingsTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    key = UnicodeAttribute(range_key=True)
    # KMS encrypts at most 4 KB at a time: a longer value is encrypted in parts, in order (see
    # stepwise.settings.crypto). Each element is a plain KMS ciphertext blob.
    ciphertext = ListAttribute(of=BinaryAttribute)
    kms_key_id = UnicodeAttribute()  # the key ARN KMS reports, for audits and re-encryption
    updated_at = UTCDateTimeAttribute()


class QuotaItem(Model):
    """A tenant's usage of one quota (quota = "active_runs" | "schedules"): a counter moved in the same
    transaction as the item it counts, so it can neither drift nor be raced past its limit."""

    class Meta:
        table_name = "QuotasTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    quota = UnicodeAttribute(range_key=True)
    used = NumberAttribute(default=0)


class StepShareItem(Model):
    """A tenant's model steps under way (quota = "steps"): `used` counts the runs holding one of the
    tenant's step shares, and each holder is an attribute of its own, `h#<run id>`, holding the epoch
    second its lease ends (stepwise.store.shares writes them by path: pynamodb declares no dynamic
    names), moved in the same update as the count."""

    class Meta:
        table_name = "QuotasTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    quota = UnicodeAttribute(range_key=True)
    used = NumberAttribute(default=0)


class UsageCounterItem(Model):
    """A tenant's usage in one hour, for one (agent, model or billed tool action, user): atomic counters
    moved in the same transaction as the run context's write that takes the usage line
    (stepwise.usage.counters). quota = "usage#<hour>#<agent>#<model or tool:action>#<user or ->"."""

    class Meta:
        table_name = "QuotasTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    quota = UnicodeAttribute(range_key=True)
    hour = UnicodeAttribute(null=True)
    agent_id = UnicodeAttribute(null=True)
    model = UnicodeAttribute(null=True)
    tool = UnicodeAttribute(null=True)
    user_id = UnicodeAttribute(null=True)
    input_tokens = NumberAttribute(default=0)
    cached_tokens = NumberAttribute(default=0)
    cache_write_tokens = NumberAttribute(default=0)
    output_tokens = NumberAttribute(default=0)
    billable_tokens = NumberAttribute(default=0)
    cost_usd = NumberAttribute(default=0)
    unpriced = NumberAttribute(default=0)  # model calls without a known price (their cost is unknown)
    runs = NumberAttribute(default=0)
    model_calls = NumberAttribute(default=0)
    tool_calls = NumberAttribute(default=0)


class BudgetItem(Model):
    """A tenant's budget (quota = "budget#<scope>"): its limits, and its spend per period in attributes
    named after the period (`cost@2026-12-04`, `tokens@2026-12`), which a step's usage transaction ADDs
    to (stepwise.usage.budgets explains why the names carry the period)."""

    class Meta:
        table_name = "QuotasTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    quota = UnicodeAttribute(range_key=True)
    scope = UnicodeAttribute(null=True)  # absent: a stub a late spend write left after a DELETE
    period = UnicodeAttribute(null=True)
    max_cost_usd = NumberAttribute(null=True)
    max_billable_tokens = NumberAttribute(null=True)
    soft_limit_pct = NumberAttribute(null=True)
    on_exceed = UnicodeAttribute(null=True)
    count_keys = UnicodeAttribute(null=True)
    updated_at = UTCDateTimeAttribute(null=True)


PARKED_TENANT = "#parked"  # a partition no tenant id can name (it has no "#")


class ParkedItem(Model):
    """A run parked on a run-level wait (a budget, a provider's circuit), listed for whatever resumes it
    (the reconciler's sweep, a budget raised): pk = PARKED_TENANT, quota = "<tenant>#<parked_at>#<run>",
    so one tenant's parked runs are a key range, oldest first."""

    class Meta:
        table_name = "QuotasTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    quota = UnicodeAttribute(range_key=True)
    run_tenant = UnicodeAttribute()
    run_id = UnicodeAttribute()
    interaction_id = UnicodeAttribute()
    kind = UnicodeAttribute()
    data = JSONAttribute(null=True)


class CircuitItem(Model):
    """A provider's circuit for one key owner (stepwise.usage.circuits), beside the quota counters: pk
    the owner's tenant ("_deployment" for the deployment's keys), sk "circuit#<provider>" (an agent's
    own key: "circuit#<provider>#<agent_id>"). Written only by failing calls, the probe and parking."""

    class Meta:
        table_name = "QuotasTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    quota = UnicodeAttribute(range_key=True)
    failures = NumberAttribute(default=0)  # rate-limited or unavailable answers in a row
    first_failure_at = UTCDateTimeAttribute(null=True)  # of the current streak: the window starts here
    opened_at = UTCDateTimeAttribute(null=True)  # set while open
    model = UnicodeAttribute(null=True)  # the last model that failed: what the probe calls
    # [{tenant_id, run_id, interaction_id, parked_at}], oldest first: parking appends (list_append).
    waiting: ListAttribute[Any] = ListAttribute(null=True)


class WebhookDeliveryItem(Model):
    """One webhook delivery of a run (pk = "<tenant_id>#<run_id>", sk = its webhook id): the body it
    sends, where it stands, and its recent attempts. Expires with the run's events."""

    class Meta:
        table_name = "WebhooksTable"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    run_id = UnicodeAttribute()
    event = UnicodeAttribute()
    url = UnicodeAttribute()
    body = UnicodeAttribute()
    status = UnicodeAttribute()  # pending | retrying | delivered | failed
    attempts = NumberAttribute(default=0)
    created_at = UTCDateTimeAttribute()
    gives_up_at = UTCDateTimeAttribute()
    next_attempt_at = UTCDateTimeAttribute(null=True)
    # Epoch seconds until which the worker that claimed the next attempt alone may make it.
    lease_until = NumberAttribute(null=True)
    last_status_code = NumberAttribute(null=True)
    last_error = UnicodeAttribute(null=True)
    delivered_at = UTCDateTimeAttribute(null=True)
    history = JSONAttribute(null=True)  # the most recent attempts, oldest first
    # Headers the delivery sends besides the signature's (an A2A push config's token): never listed.
    headers = JSONAttribute(null=True)
    expires_at = TTLAttribute(null=True)


class WebhookSecretItem(Model):
    """A tenant's webhook signing secret (pk = tenant_id, sk = "secret"), as SettingsKey ciphertext
    (stepwise.settings.crypto, under the name "webhook_secret"), and the one it replaced while that one
    still signs."""

    class Meta:
        table_name = "WebhooksTable"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    current = ListAttribute(of=BinaryAttribute)
    created_at = UTCDateTimeAttribute()
    previous = ListAttribute(of=BinaryAttribute, null=True)
    previous_until = UTCDateTimeAttribute(null=True)
    kms_key_id = UnicodeAttribute()


class MemoryItem(Model):
    """A memory of one end user of one agent: pk = "<tenant>#<agent_id>", sk = "<user_id>#<memory_id>".
    One partition per agent, so deleting an agent finds every user's memories in one query; a user's
    memories are one sort-key range of it (user ids hold no "#"), read in one query."""

    class Meta:
        table_name = "MemoriesTable"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    memory_id = UnicodeAttribute()
    content = UnicodeAttribute()
    tags = ListAttribute(of=UnicodeAttribute, null=True)
    created_at = UTCDateTimeAttribute()
    source_run_id = UnicodeAttribute(null=True)
    origin = UnicodeAttribute(null=True)  # "tool" when written after the run read a tool's result
    embedding = BinaryAttribute(null=True, legacy_encoding=False)  # float32s, little-endian


class MemoryHeadItem(Model):
    """sk = "<user_id>#head": how many memories the user holds (the bound is a condition on it) and a
    revision that every save and delete replaces in the same transaction, so a function that cached
    the user's memories knows from this one small read whether its copy is current. The revision is a
    fresh random id, not a counter: a counter restarts when a user is forgotten, and a cached copy of
    the forgotten memories would match the new ones' revision."""

    class Meta:
        table_name = "MemoriesTable"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    held = NumberAttribute(default=0)  # memories the user holds (not `count`: Model.count is a method)
    revision = UnicodeAttribute(null=True)


def _region() -> str:
    return config.platform().any_region


_Owned = TypeVar("_Owned", RunItem, InteractionItem)  # the items that index queries return


def same_tenant(items: Iterable[_Owned], tenant_id: str) -> Iterator[_Owned]:
    """The items of a query that belong to `tenant_id`. Defence in depth for index queries: their keys
    already carry the tenant, so an item of another tenant here is a bug, logged and never returned."""
    for item in items:
        if item.tenant_id == tenant_id:
            yield item
        else:
            logger.error("a query returned another tenant's item; dropped", table=item.Meta.table_name)


ITEM_LIMIT = 400 * 1024  # DynamoDB's item size limit, names and values together


def item_size(item: Model) -> int:
    """The item's size as DynamoDB counts it against ITEM_LIMIT (attribute names plus values; nested
    lists and maps 3 bytes each, plus 1 per element), from its serialized attributes."""
    return sum(len(name.encode()) + _value_size(value) for name, value in item.serialize().items())


def _value_size(value: dict[str, Any]) -> int:
    ((kind, data),) = value.items()
    if kind == "S":
        return len(str(data).encode())
    if kind == "N":
        return len(str(data).lstrip("-").replace(".", "")) // 2 + 2  # DynamoDB's own upper bound
    if kind == "B":
        return len(data)
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "L":
        return 3 + sum(1 + _value_size(v) for v in data)
    if kind == "M":
        return 3 + sum(1 + len(k.encode()) + _value_size(v) for k, v in data.items())
    return sum(len(str(v).encode()) for v in data)  # SS, NS, BS


def check_fits(item: Model, what: str) -> None:
    """A 413 `item_too_large` for an item DynamoDB would refuse, before the write: what a tenant sends
    (a schema, a script) must not reach DynamoDB as a ValidationException and answer as a 500."""
    size = item_size(item)
    if size > ITEM_LIMIT:
        raise PayloadTooLarge(
            f"{what} would take {size} bytes, over the {ITEM_LIMIT} bytes DynamoDB stores in one item",
            code="item_too_large",
            details={"size": size, "limit": ITEM_LIMIT},
        )


class EvalItem(Model):
    """An eval suite (sk = "suite#<eval_id>") or one of its eval runs (sk = "run#<eval_id>#<eval_run_id>"):
    tenant first, so a tenant's suites are one query and a suite's eval runs one sort-key range of it.
    `data` holds the suite (name, agent, cases, assertions) or the eval run (its snapshot of the suite,
    overrides, and once scored its results)."""

    class Meta:
        table_name = "EvalsTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    eval_id = UnicodeAttribute()
    kind = UnicodeAttribute()  # suite | run
    status = UnicodeAttribute(null=True)  # an eval run's: running | succeeded | failed
    done = NumberAttribute(default=0)  # an eval run's cases whose run has ended
    data = JSONAttribute()
    created_at = UTCDateTimeAttribute()
    finished_at = UTCDateTimeAttribute(null=True)


class McpAuthItem(Model):
    """MCP servers' OAuth grants (id = "grant#<tenant_id>#<agent>/<server>/<created_at>") and the
    authorizations in flight (id = "state#<sha256 of the state>", with a TTL). Both hold only KMS
    ciphertext (stepwise.settings.crypto) under the context {tenant_id, key: "mcp-oauth/..."}."""

    class Meta:
        table_name = "McpAuthTable"

    id = UnicodeAttribute(hash_key=True)
    tenant_id = UnicodeAttribute()
    ciphertext = ListAttribute(of=BinaryAttribute)
    used_at = UTCDateTimeAttribute(null=True)  # a state, once its callback arrived
    # A state, once its start link was opened: the SHA-256 of the nonce in that browser's cookie.
    nonce_hash = UnicodeAttribute(null=True)
    updated_at = UTCDateTimeAttribute()
    expires_at = TTLAttribute(null=True)


class WorkflowItem(Model):
    """A tenant's workflows and what their runs did, tenant first: a workflow's head (sk = "wf#<id>",
    its latest version's definition), each published version (sk = "wf#<id>#v#<000n>", with its state
    machine), and each node a workflow run ran (sk = "node#<run_id>#<node key>", the child run and how
    it ended: a replay reuses the succeeded ones)."""

    class Meta:
        table_name = "WorkflowsTable"

    tenant_id = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute()  # workflow | version | node
    status = UnicodeAttribute(null=True)  # a node's: running | succeeded | failed
    data = JSONAttribute()
    created_at = UTCDateTimeAttribute()
    updated_at = UTCDateTimeAttribute(null=True)


class TriggersByTenant(GlobalSecondaryIndex["TriggerItem"]):
    """Sparse: only trigger items carry `tenant_id`, so a tenant's triggers are one query and deliveries
    (the table's busy items) write no index."""

    class Meta:
        index_name = "by_tenant"
        projection = AllProjection()

    tenant_id = UnicodeAttribute(hash_key=True)
    pk = UnicodeAttribute(range_key=True)


class TriggerDeliveryItem(Model):
    """One request that reached a trigger (pk = trigger id, sk = "dlv#<delivery id>", newest last): what
    it carried and what became of it. Expires after TRIGGER_DELIVERIES_TTL_DAYS."""

    class Meta:
        table_name = "TriggersTable"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    delivery_id = UnicodeAttribute()
    # received | started | deduplicated | refused | retrying | failed
    status = UnicodeAttribute()
    received_at = UTCDateTimeAttribute()
    dedupe_key = UnicodeAttribute(null=True)
    # The request's JSON body and the headers a template may read, zlib-compressed.
    payload = BinaryAttribute(null=True, legacy_encoding=False)
    run_id = UnicodeAttribute(null=True)
    duplicate_of = UnicodeAttribute(null=True)
    reason = UnicodeAttribute(null=True)
    attempts = NumberAttribute(default=0)
    updated_at = UTCDateTimeAttribute(null=True)
    expires_at = TTLAttribute(null=True)


class TriggerKeyItem(Model):
    """The dedupe marker of one delivery key (pk = trigger id, sk = "key#<sha256 of the key>"): written
    with the delivery in one transaction, only if absent, so a repeat finds it and starts nothing."""

    class Meta:
        table_name = "TriggersTable"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    delivery_id = UnicodeAttribute()
    expires_at = TTLAttribute(null=True)


class TriggerAddressItem(Model):
    """An inbound address an email trigger claimed (pk = "addr#<address>", sk = "address"): how a
    message SES received finds its trigger, and why two triggers cannot claim one address."""

    class Meta:
        table_name = "TriggersTable"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    trigger_id = UnicodeAttribute()
    # Not `tenant_id`: an item carrying that attribute would appear in the triggers' by_tenant index.
    owner = UnicodeAttribute()


class TriggerItem(Model):
    """A trigger (pk = its trigger id, sk = "trigger"). The public intake route knows only the trigger id,
    so the id is the partition key (like ApiKeysTable's key hash); `tenant_id` is checked on
    every authenticated read and indexed for the tenant's list. The signing secrets are SettingsKey
    ciphertext under the tenant and "trigger/<trigger id>" (stepwise.settings.crypto)."""

    class Meta:
        table_name = "TriggersTable"

    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)
    tenant_id = UnicodeAttribute()
    doc = JSONAttribute()  # the Trigger model, validated by pydantic on the way in and out
    secret = ListAttribute(of=BinaryAttribute, null=True)
    previous_secret = ListAttribute(of=BinaryAttribute, null=True)
    previous_until = UTCDateTimeAttribute(null=True)
    # Requests refused by the intake, counted by reason (ADD: no read first, nothing else changes).
    refused_signature = NumberAttribute(null=True)  # a bad or missing signature
    refused_stale = NumberAttribute(null=True)  # a timestamp over 5 minutes from now
    refused_too_large = NumberAttribute(null=True)  # a body over 1 MB
    # A mailbox trigger's position in its mailbox (Gmail's history id): where the next read starts.
    cursor = UnicodeAttribute(null=True)
    # When a mailbox trigger's watch (or subscription) ends: the renewal sweep's filter.
    watch_expires_at = UTCDateTimeAttribute(null=True)

    by_tenant = TriggersByTenant()


class StartKeyItem(Model):
    """Which run a keyed start made (id = "<tenant>#start#<sha256 of the key>"), in the idempotency
    table beside Powertools' records (whose ids are "<function>#<md5>", so none can collide). Powertools
    forgets a start that raised, and its in-progress record expires with its invocation; this item does
    neither, so a retried start finds the run the first attempt recorded instead of making another."""

    class Meta:
        table_name = "IdempotencyTable"

    id = UnicodeAttribute(hash_key=True)
    run_id = UnicodeAttribute()
    expiration = TTLAttribute()  # the table's TTL attribute, as for Powertools' records


@cache
def bind() -> None:
    """Point the models at the tables named in the environment (once per process)."""
    names = config.tables()
    region = _region()
    for model, name in (
        (ApiKeyItem, names.api_keys),
        (AgentItem, names.agents),
        (SessionItem, names.sessions),
        (RunItem, names.runs),
        (RunEventItem, names.run_events),
        (RunHeadItem, names.run_events),
        (RunContextItem, names.run_events),
        (FollowerItem, names.followers),
        (InteractionItem, names.interactions),
        (EffectItem, names.effects),
        (ScheduleItem, names.schedules),
        (SettingItem, names.settings),
        (QuotaItem, names.quotas),
        (UsageCounterItem, names.quotas),
        (StepShareItem, names.quotas),
        (BudgetItem, names.quotas),
        (ParkedItem, names.quotas),
        (TreeSpendItem, names.run_events),
        (CircuitItem, names.quotas),
        (McpAuthItem, names.mcp_auth),
        (WebhookDeliveryItem, names.webhooks),
        (WebhookSecretItem, names.webhooks),
        (MemoryItem, names.memories),
        (MemoryHeadItem, names.memories),
        (EvalItem, names.evals),
        (WorkflowItem, names.workflows),
        (TriggerItem, names.triggers),
        (TriggerDeliveryItem, names.triggers),
        (TriggerKeyItem, names.triggers),
        (TriggerAddressItem, names.triggers),
        (StartKeyItem, names.idempotency),
    ):
        meta: Any = model.Meta
        meta.table_name = name
        meta.region = region
        model._connection = None  # the connection caches the table name


def rebind() -> None:
    """Re-read table names (tests and the local stack change the environment)."""
    bind.cache_clear()
    connection.cache_clear()
    bind()


@cache
def connection() -> Connection:
    """The connection transactions use (TransactWrite names no model to take one from)."""
    bind()
    return Connection(region=_region())


def condition_failed(exc: PynamoDBException) -> bool:
    """Whether a write failed only because its condition did not hold."""
    return exc.cause_response_code == "ConditionalCheckFailedException"

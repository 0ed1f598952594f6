"""Starting runs: the record first, then the execution, whose name is the run id so a retried start can
never create a second execution for the same run.

Double texting: a session has at most one active run. A run started on a busy session is queued
behind it (`enqueue`, the default), refused (`reject`: 409 session_busy) or put first while the active
run is cancelled (`interrupt`). The session's conditional writes decide, so two concurrent starts can
never both become active.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from typing import Any

from stepwise.agents import bounds
from stepwise.agents.models import DEFAULT_MAX_STEPS, Agent
from stepwise.attachments import intake
from stepwise.attachments.models import Attachment
from stepwise.core import aws, config, observability
from stepwise.core.errors import Conflict, NotFound, Unprocessable
from stepwise.core.ids import new_id
from stepwise.core.schema import utcnow
from stepwise.runs import suspension
from stepwise.runs.cancel import cancel_active
from stepwise.runs.models import AgentPaused, Run, RunCreate, RunExists, SyncRunCreate
from stepwise.runs.ports import stores
from stepwise.runs.queue import StartFailed, launch
from stepwise.runs.state import SyncAnswer
from stepwise.sessions.models import Session
from stepwise.webhooks import keys as webhook_keys
from stepwise.webhooks.models import WebhookConfig


def _busy(session: Session) -> Conflict:
    return Conflict(
        "the session has an active run; wait for it, cancel it, or start with multitask_strategy "
        "enqueue or interrupt",
        code="session_busy",
        details={"active_run_id": session.active_run_id},
    )


def _session_for(
    tenant_id: str, agent_id: str, session_id: str | None, run: Run, new_session_id: str
) -> tuple[Session, bool]:
    """The run's session, and whether the run already holds it (a new session is born held)."""
    if session_id is None:
        created = stores().sessions.create(
            tenant_id, new_session_id, agent_id, active_run_id=run.run_id, user_id=run.user_id
        )
        return created, True
    session = stores().sessions.get(tenant_id, session_id)
    if session.agent_id != agent_id:
        raise Conflict(
            f"session {session_id} belongs to another agent; start a new session for this one",
            code="session_agent_mismatch",
        )
    return session, False


def _user_of(tenant_id: str, body: RunCreate | SyncRunCreate) -> str | None:
    """The run's user: the one named, else its session's. A session is one user's conversation from
    its first run on, so continuing it as another user (or as a named user when it has none) would
    hand one user's history to another: 409 `session_user_mismatch`."""
    if body.session_id is None:
        return body.user_id
    owner = stores().sessions.get(tenant_id, body.session_id).user_id
    if body.user_id is not None and body.user_id != owner:
        raise Conflict(
            f"session {body.session_id} is "
            + (f"user {owner!r}'s" if owner else "not a user's")
            + f"; start a new session for user {body.user_id!r}",
            code="session_user_mismatch",
        )
    return owner


def _check_client_tools(agent: Agent, client_tools: list[dict[str, Any]]) -> None:
    """A run's own client tools add to the agent's: none may shadow one of its tools, or another."""
    names = [str(tool.get("name")) for tool in client_tools]
    taken = {tool.name for tool in agent.tools} & set(names)
    if taken or len(set(names)) < len(names):
        clash = sorted(taken or {n for n in names if names.count(n) > 1})
        raise Unprocessable(
            f"the run's client tools must have names of their own: {', '.join(clash)}",
            code="tool_name_conflict",
            details={"names": clash},
        )


def _record(
    tenant_id: str,
    agent: Agent,
    body: RunCreate | SyncRunCreate,
    max_steps: int,
    *,
    run_id: str | None = None,
    unrecorded: bool = False,
    trigger_id: str | None = None,
    replay_of: str | None = None,
    replayed: Run | None = None,
    instructions: str | None = None,
    client_tools: list[dict[str, Any]] | None = None,
    new_session_id: str | None = None,
    what_if_of: str | None = None,
    what_if: dict[str, Any] | None = None,
    callback_token: str | None = None,
) -> tuple[Run, bool]:
    # Before anything is written: an agent stored before AllowedModels was narrowed (or one that names
    # no model while the default is outside it) starts nothing.
    bounds.check_effective(agent.model)
    suspension.check_request(tenant_id)  # an entrance that is not a request (a schedule's delivery)
    if agent.paused:
        raise AgentPaused(
            f"agent {agent.agent_id} is paused; unpause it (PATCH paused: false) to start runs",
            code="agent_paused",
        )
    items = getattr(body, "attachments", [])
    intake.check_inline_size(items)
    _check_client_tools(agent, client_tools or [])
    if run_id is not None and not unrecorded and stores().runs.exists(tenant_id, run_id):
        raise RunExists(f"run {run_id} exists already", code="run_exists")
    run_id = run_id or new_id("run")
    strategy = getattr(body, "multitask_strategy", "enqueue")
    # Fixed for the run's life when it starts: an agent's webhook changed later applies to later runs.
    webhook = getattr(body, "webhook", None) or agent.webhook
    if what_if is not None and not what_if.get("webhooks"):
        webhook = None  # a what-if run tells no one it ended, unless its request asked to
    if webhook is not None:
        webhook_keys.require(tenant_id)
    # The files are copied under the run before its record lists them; a start refused after this
    # point takes its copies back with it.
    if replayed is not None:
        attachments = replayed.attachments
        intake.carry(tenant_id, replayed.run_id, run_id, attachments)
    else:
        attachments = intake.take(tenant_id, run_id, items) if items else []
    try:
        created = _record_run(
            tenant_id,
            agent,
            body,
            max_steps,
            run_id,
            trigger_id,
            replay_of,
            attachments,
            strategy,
            webhook,
            instructions,
            client_tools or [],
            new_session_id,
            what_if_of,
            what_if,
            callback_token,
        )
    except RunExists:
        raise  # the copies under this run id are that run's own (a concurrent retry of a keyed start)
    except BaseException:
        if attachments:
            intake.erase(tenant_id, run_id)
        raise
    if items and replayed is None:
        # The run's record lists its copies now: the uploads go, so erasing the run's files leaves
        # nothing readable behind, and no later run can name the same upload again (review finding 6).
        intake.release_uploads(tenant_id, items)
    return created


def _record_run(
    tenant_id: str,
    agent: Agent,
    body: RunCreate | SyncRunCreate,
    max_steps: int,
    run_id: str,
    trigger_id: str | None,
    replay_of: str | None,
    attachments: list[Attachment],
    strategy: str,
    webhook: WebhookConfig | None,
    instructions: str | None,
    client_tools: list[dict[str, Any]],
    new_session_id: str | None,
    what_if_of: str | None,
    what_if: dict[str, Any] | None,
    callback_token: str | None = None,
) -> tuple[Run, bool]:
    budget = getattr(body, "max_tokens_budget", None) or agent.max_tokens_budget
    run = Run(
        run_id=run_id,
        trigger_id=trigger_id or run_id,
        replay_of=replay_of,
        agent_id=agent.agent_id,
        session_id=body.session_id or new_session_id or new_id("ses"),
        user_id=_user_of(tenant_id, body),
        status="queued",
        input=body.message,
        max_steps=max_steps,
        max_tokens_budget=budget,
        tools_executed=[],
        metadata=body.metadata,
        script=body.script,
        instructions=instructions,
        webhook=webhook,
        attachments=attachments,
        client_tools=client_tools,
        what_if_of=what_if_of,
        what_if=what_if,
        callback_token=callback_token,
        created_at=utcnow(),
    )
    runs = stores().runs
    runs.check_fits(tenant_id, run)  # before anything is written: a refused start leaves nothing behind
    session, held = _session_for(tenant_id, agent.agent_id, body.session_id, run, run.session_id)
    if not held and strategy == "reject" and session.active_run_id:
        raise _busy(session)  # likewise
    return runs.create(tenant_id, run), held


def _take_turn(tenant_id: str, run: Run, strategy: str) -> bool:
    """Hold the session for `run`, or queue it. True when it may start now."""
    store = stores()
    for _ in range(10):  # the active run may end between our two writes: then claim again
        if store.sessions.claim(tenant_id, run.session_id, run.run_id):
            return True
        if strategy == "reject":
            store.runs.delete(tenant_id, run.run_id)  # lost a race to another start: undo our record
            if run.attachments:
                intake.erase(tenant_id, run.run_id)
            raise _busy(store.sessions.get(tenant_id, run.session_id))
        if store.sessions.enqueue(tenant_id, run.session_id, run.run_id, first=strategy == "interrupt"):
            if strategy == "interrupt":
                cancel_active(tenant_id, run.session_id, reason=f"interrupted by run {run.run_id}")
            return False
    raise Conflict("the session is too busy to start a run right now; try again", code="session_busy")


def start_run(
    tenant_id: str,
    agent_id: str,
    body: RunCreate,
    *,
    run_id: str | None = None,
    unrecorded: bool = False,
    trigger_id: str | None = None,
    replay_of: str | None = None,
    replayed: Run | None = None,
    instructions: str | None = None,
    client_tools: list[dict[str, Any]] | None = None,
    new_session_id: str | None = None,
    what_if_of: str | None = None,
    what_if: dict[str, Any] | None = None,
    callback_token: str | None = None,
) -> Run:
    """Record the run, then start its execution, or queue it behind its session's active run.
    A replay passes the run it replays as `replayed`: its files are copied to the new run. A protocol
    door passes the caller's `instructions`, appended to the agent's system prompt for this run only.

    A caller that must never start the same thing twice (a schedule's delivery, an event) passes a
    `run_id` derived from it: the record's conditional write then refuses the duplicate (RunExists),
    and a read first spares the duplicate's session and file copies, unless the caller has just looked
    (`unrecorded`, start_keyed).

    `client_tools` (ClientTool specs, validated by the caller) are the run's own, beside the agent's;
    `new_session_id` names the session a run without `session_id` creates (a door that maps its own
    conversation ids onto sessions). A what-if run (stepwise.evals.whatif) names the run it replays
    (`what_if_of`) and carries its request (`what_if`). `callback_token`: a Step Functions task token
    the run's ending sends back with its outcome (an eval case's run: its EvalRun execution waits on it)."""
    agent = stores().agents.get(tenant_id, agent_id)
    max_steps = body.max_steps or agent.max_steps or DEFAULT_MAX_STEPS
    run, held = _record(
        tenant_id,
        agent,
        body,
        max_steps,
        run_id=run_id,
        unrecorded=unrecorded,
        trigger_id=trigger_id,
        replay_of=replay_of,
        replayed=replayed,
        instructions=instructions,
        client_tools=client_tools,
        new_session_id=new_session_id,
        what_if_of=what_if_of,
        what_if=what_if,
        callback_token=callback_token,
    )
    if held or _take_turn(tenant_id, run, body.multitask_strategy):
        launch(tenant_id, run)
    return run


def start_keyed(tenant_id: str, agent_id: str, body: RunCreate, *, key: str, **options: Any) -> Run:
    """`start_run` (with its keyword `options`) for a start behind an idempotency key: every caller of
    `once` starts this way, with its door and agent in `key`. The run is recorded under the id the key
    holds (`_keyed`), so a start retried after a failure finds the run its first attempt recorded and
    carries that one on instead of making a second."""
    run_id, found = _keyed(tenant_id, key, body)
    if found is not None:
        return found
    try:
        return start_run(tenant_id, agent_id, body, run_id=run_id, unrecorded=True, **options)
    except RunExists:  # a concurrent attempt under the same key recorded it first
        return _resume(tenant_id, stores().runs.get(tenant_id, run_id), body)


class KeyReused(Unprocessable):
    """The key started a run with another message or session (`once` answers it as its `reused`)."""

    code = "idempotency_key_reused"


def _never_started(run: Run) -> bool:
    return run.status == "failed" and run.error is not None and run.error.code == StartFailed.code


def _keyed(tenant_id: str, key: str, body: RunCreate) -> tuple[str, Run | None]:
    """The run id a keyed start records its run under, and that run when an earlier attempt recorded
    it already (carried on by `_resume`). Powertools alone cannot promise one run per key: it forgets
    a start that raised, and an in-progress record expires with its invocation, so an attempt that
    recorded and launched its run and then failed (its answer, or the record's completion, lost to a
    fault) was run again under a new id: two runs, each sending its own emails (issue 30's soak).

    A run whose execution could not be started (launch failed it `start_failed`, and the 503 said to
    try again) is not carried on: the key moves to a new id, so the retry starts afresh, as it did
    before the key held a run."""
    keys = stores().start_keys
    proposed = new_id("run")
    run_id = keys.claim(tenant_id, key, proposed)
    if run_id == proposed:
        return run_id, None  # the key was free: the first attempt (nothing can be recorded under a new id)
    for _ in range(5):
        try:
            run = stores().runs.get(tenant_id, run_id)
        except NotFound:
            return run_id, None  # the attempt that took the key died (or was refused) before recording
        if not _never_started(run):
            return run_id, _resume(tenant_id, run, body)
        run_id = keys.move(tenant_id, key, run_id, new_id("run"))
    raise StartFailed("the run could not be started; try again")


def _resume(tenant_id: str, run: Run, body: RunCreate) -> Run:
    """Carry on the run an earlier attempt under the same key recorded: it may have died before the
    run took its turn on the session, or before its execution started (both idempotent: a claim by
    the run that holds the session, and an execution named after the run)."""
    if run.input != body.message or body.session_id not in (None, run.session_id):
        raise KeyReused("this key already started a run with another message or session")
    if run.status != "queued":
        return run
    session = stores().sessions.get(tenant_id, run.session_id)
    held = session.active_run_id == run.run_id
    if held or (run.run_id not in session.queue and _take_turn(tenant_id, run, body.multitask_strategy)):
        launch(tenant_id, run)
    return run


def run_sync(tenant_id: str, agent_id: str, body: SyncRunCreate) -> Run:
    """One model call without tools, answered in the response. The model step runs in its own function
    (the API never imports the model SDK), invoked synchronously."""
    store = stores()
    run, held = _record(tenant_id, store.agents.get(tenant_id, agent_id), body, 1)
    if not held and not store.sessions.claim(tenant_id, run.session_id, run.run_id):
        store.runs.delete(tenant_id, run.run_id)
        raise _busy(store.sessions.get(tenant_id, run.session_id))
    payload = SyncAnswer(tenant_id=tenant_id, run_id=run.run_id).model_dump_json()
    observability.run_started(run)
    response = aws.client("lambda").invoke(
        FunctionName=config.api_targets().step_function, Payload=payload.encode()
    )
    response["Payload"].read()  # the run record is the answer; a FunctionError shows on it as `error`
    return store.runs.get(tenant_id, run.run_id)


IDEMPOTENCY_HOURS = 24
INSTRUCTIONS = "instructions"


def start_key(*parts: str) -> str:
    """A keyed start's key from its parts (the door, the agent, the caller's ids), as a JSON list: no
    caller's id can spell another's parts, whatever characters it holds."""
    return json.dumps(parts)


def guarded(
    event_key: str, payload: str, begin: Callable[[dict[str, Any]], dict[str, Any]]
) -> tuple[Any, Callable[..., dict[str, Any]]]:
    """`begin(request)` behind Powertools idempotency: keyed by the request's `event_key` (a JMESPath,
    tenant first), with its `payload` validated, for IDEMPOTENCY_HOURS. Every retry-safe start uses it:
    an Idempotency-Key here, a protocol's own id at a door (A2A's messageId, AG-UI's threadId and runId)."""
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )
    from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyItemAlreadyExistsError
    from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import (
        STATUS_CONSTANTS,
        DataRecord,
    )

    persistence = DynamoDBPersistenceLayer(table_name=config.tables().idempotency)
    put = persistence._put_record

    def put_retry_safe(data_record: DataRecord) -> None:
        """botocore retries the in-progress record's put when its answer was lost (a timeout); the retry
        found the record it had itself written and the start answered 409 request_in_progress to the
        request that owned it (issue 30's soak). A record with our own expiry instants (to the second
        and the millisecond) is ours: the put succeeded."""
        try:
            put(data_record)
        except IdempotencyItemAlreadyExistsError as exc:
            old = exc.old_data_record or persistence._get_record(data_record.idempotency_key)
            mine = (
                old.status == STATUS_CONSTANTS["INPROGRESS"]
                and data_record.in_progress_expiry_timestamp is not None
                and old.expiry_timestamp == data_record.expiry_timestamp
                and old.in_progress_expiry_timestamp == data_record.in_progress_expiry_timestamp
            )
            if not mine:
                raise

    persistence._put_record = put_retry_safe  # type: ignore[method-assign]
    settings = IdempotencyConfig(
        event_key_jmespath=event_key,
        payload_validation_jmespath=payload,
        expires_after_seconds=IDEMPOTENCY_HOURS * 3600,
    )
    return settings, idempotent_function(
        data_keyword_argument="request", persistence_store=persistence, config=settings
    )(begin)


def once(
    guard: tuple[Any, Callable[..., dict[str, Any]]],
    request: dict[str, Any],
    *,
    lambda_context: Any,
    reused: Unprocessable,
    what: str,
) -> dict[str, Any]:
    """Call a `guarded` start: the first call's answer, again for a retry. The same key with another
    payload is `reused` (422); one still in progress is a 409 `request_in_progress` naming `what`.
    `lambda_context` lets an in-progress record expire with the invocation that made it."""
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
        IdempotencyValidationError,
    )

    settings, begin = guard
    try:
        settings.register_lambda_context(lambda_context)
        result: dict[str, Any] = begin(request=request)
    except (IdempotencyValidationError, KeyReused):
        raise reused from None
    except IdempotencyAlreadyInProgressError:
        raise Conflict(
            f"a request with {what} is in progress; retry shortly", code="request_in_progress"
        ) from None
    return result


def _start_from(request: dict[str, Any]) -> dict[str, Any]:
    fields = dict(request["body"])
    # A door's instructions ride in the validated body (another value under the same key is a
    # reuse) but are not a field of RunCreate, whose contract is POST /v1/agents/{id}/runs'.
    instructions = fields.pop(INSTRUCTIONS, None)
    body = RunCreate.model_validate(fields)
    tenant_id, agent_id = request["tenant_id"], request["agent_id"]
    key = start_key("runs", agent_id, request["key"])
    return accepted(start_keyed(tenant_id, agent_id, body, key=key, instructions=instructions))


@cache
def _idempotent_start() -> tuple[Any, Callable[..., dict[str, Any]]]:
    """start_run keyed by tenant, agent and Idempotency-Key, with the body as the payload to validate:
    the same key and body give the same run; another body is a 422."""
    return guarded("[tenant_id, agent_id, key]", "body", _start_from)


def accepted(run: Run) -> dict[str, Any]:
    """What `POST …/runs` answers (202): the run's ids, status and the attachments it took."""
    return {
        "run_id": run.run_id,
        "session_id": run.session_id,
        "status": run.status,
        "attachments": [a.model_dump() for a in run.attachments],
    }


def start_run_once(
    tenant_id: str,
    agent_id: str,
    body: RunCreate,
    *,
    key: str | None,
    lambda_context: Any = None,
    instructions: str | None = None,
) -> dict[str, Any]:
    """`POST /v1/agents/{id}/runs`: without a key, a run; with an Idempotency-Key, the same key and body
    give the same run for IDEMPOTENCY_HOURS, another body is a 422 `idempotency_key_reused` and one
    still in progress a 409 `request_in_progress`. `lambda_context` lets an in-progress record expire
    with the invocation that made it. `instructions`: see start_run."""
    if not key:
        return accepted(start_run(tenant_id, agent_id, body, instructions=instructions))
    fields = body.model_dump(mode="json")
    if instructions is not None:  # absent otherwise: a body without them validates as it always has
        fields[INSTRUCTIONS] = instructions
    return once(
        _idempotent_start(),
        {"tenant_id": tenant_id, "agent_id": agent_id, "key": key, "body": fields},
        lambda_context=lambda_context,
        reused=Unprocessable(
            "this Idempotency-Key was already used with a different body", code="idempotency_key_reused"
        ),
        what="this Idempotency-Key",
    )

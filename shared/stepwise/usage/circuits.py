"""Provider circuits: when a provider's quota is spent (or it is down), the queue pauses instead of
every run burning its retries and failing.

**Whose circuit.** A provider's quota belongs to the key that pays, so there is one circuit per key
owner and provider: the deployment's keys share one (`_deployment`), a tenant's own key has the
tenant's, an agent's own key the agent's (stepwise.settings.providers decides whose key a call uses).
One tenant's exhausted key never pauses another tenant; the deployment's exhausted key pauses every
run that uses it.

**Opening.** A rate-limited or unavailable answer (RateLimited, ProviderUnavailable) counts on the
circuit's item (the quotas table, stepwise.core.tables.CircuitItem): `threshold` of them in a row, the
first no older than `window_seconds` (STEPWISE_CIRCUIT_THRESHOLD, default 5; _WINDOW_SECONDS, 60;
STEPWISE_CIRCUIT_THRESHOLDS per provider; a threshold of 0 turns circuits off) open it. Only failing
calls write it; the first success after failures seen by this function resets the streak (one write).
A healthy step makes no request for any of this: whether a circuit is open is read once per
CACHE_SECONDS per function instance and circuit (a GetItem), and a failing call learns it from its own
write. Within those seconds another instance may still call the provider: that call fails, counts,
and parks its run. The scripted model has no circuit.

**Parking.** While the circuit is open the Step does not call the provider: it creates a run-level
interaction of kind `provider` (no tool call) and returns `{action: "wait", wait}`; Await stores the
task token on it exactly as for an approval and emits `provider_paused`. The run waits with no
Lambda running. The run is listed on the circuit's item (oldest first), so the sweep finds it without
an index.

**Closing.** The reconciler's sweep (every 5 minutes) probes each circuit open for PROBE_AFTER_SECONDS
with one minimal call of the model that failed last, through the Step function (where litellm is).
One success closes it; the waiting runs are then resumed oldest first, at most RESUME_PER_SWEEP per
circuit per sweep, each by answering its interaction and sending task success (stepwise.runs.answers'
resume path); the next Step goes on to the model call.

The park helpers live here so that the budget park (stepwise.loop.parking) and this one can be folded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools import Logger
from pydantic import BaseModel
from pynamodb.exceptions import DoesNotExist, UpdateError

from stepwise.core import config, ids
from stepwise.core.errors import NotFound
from stepwise.core.schema import utcnow
from stepwise.core.tables import CircuitItem, bind, condition_failed
from stepwise.interactions.models import NewInteraction
from stepwise.runs import answers
from stepwise.runs.models import Run
from stepwise.runs.ports import stores
from stepwise.runs.state import Wait

logger = Logger(service="stepwise")

CACHE_SECONDS = 5.0
PROBE_AFTER_SECONDS = 30
RESUME_PER_SWEEP = 25
# A provider wait's timeout: past it the Step runs again and checks the circuit itself.
WAIT_SECONDS = 3600
DEPLOYMENT = "_deployment"
PROVIDER_WAIT = "provider"


@dataclass(frozen=True)
class Circuit:
    """One provider's circuit for one key owner."""

    pk: str
    sk: str
    provider: str
    owner: str  # "agent" | "tenant" | "deployment"
    tenant_id: str | None = None
    agent_id: str | None = None


def circuit_for(tenant_id: str, agent_id: str, provider: str, owner: str) -> Circuit:
    if owner == "agent":
        return Circuit(tenant_id, f"circuit#{provider}#{agent_id}", provider, owner, tenant_id, agent_id)
    if owner == "tenant":
        return Circuit(tenant_id, f"circuit#{provider}", provider, owner, tenant_id)
    return Circuit(DEPLOYMENT, f"circuit#{provider}", provider, owner)


def enabled(provider: str | None) -> bool:
    return bool(provider) and provider != config.SCRIPTED_MODEL and threshold(str(provider)) > 0


def threshold(provider: str) -> int:
    return config.circuits().threshold_for(provider)


# --- Reading, cached ------------------------------------------------------------------------------

_lock = threading.Lock()
_open: dict[tuple[str, str], tuple[float, bool]] = {}  # (pk, sk) → (read at, open)
_failed_here: dict[tuple[str, str], float] = {}  # circuits this function saw fail, and when


def _remember(circuit: Circuit, is_open: bool) -> None:
    with _lock:
        _open[(circuit.pk, circuit.sk)] = (time.monotonic(), is_open)


def _item(circuit: Circuit) -> CircuitItem | None:
    bind()
    try:
        return CircuitItem.get(circuit.pk, circuit.sk, consistent_read=True)
    except DoesNotExist:
        return None


def is_open(circuit: Circuit, *, fresh: bool = False) -> bool:
    """Whether the circuit is open: from this function's memory when younger than CACHE_SECONDS."""
    key = (circuit.pk, circuit.sk)
    with _lock:
        seen = _open.get(key)
    if not fresh and seen is not None and time.monotonic() - seen[0] < CACHE_SECONDS:
        return seen[1]
    item = _item(circuit)
    now_open = item is not None and item.opened_at is not None
    _remember(circuit, now_open)
    return now_open


def forget() -> None:
    """Drop this function's memory of circuits (tests)."""
    with _lock:
        _open.clear()
        _failed_here.clear()


# --- Writing: failing calls only ------------------------------------------------------------------


def record_failure(circuit: Circuit, model: str) -> bool:
    """Count one rate-limited or unavailable answer; True when the circuit is open after it."""
    bind()
    now = utcnow()
    window = timedelta(seconds=config.circuits().window_seconds)
    with _lock:
        _failed_here[(circuit.pk, circuit.sk)] = time.monotonic()
    item = CircuitItem(circuit.pk, circuit.sk)
    recent = CircuitItem.first_failure_at >= now - window
    for _ in range(3):
        try:  # the streak goes on: its first failure is recent enough
            item.update(actions=[CircuitItem.failures.add(1), CircuitItem.model.set(model)], condition=recent)
            break
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
        try:  # a new streak (none yet, or the last one is out of the window), unless one just began
            item.update(
                actions=[
                    CircuitItem.failures.set(1),
                    CircuitItem.first_failure_at.set(now),
                    CircuitItem.model.set(model),
                ],
                condition=CircuitItem.first_failure_at.does_not_exist() | ~recent,
            )
            break
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
    if item.opened_at is None and item.failures >= threshold(circuit.provider):
        try:
            item.update(
                actions=[CircuitItem.opened_at.set(now)], condition=CircuitItem.opened_at.does_not_exist()
            )
            logger.warning("circuit opened", extra={"circuit": circuit.sk, "owner": circuit.pk})
        except UpdateError as exc:
            if not condition_failed(exc):
                raise  # else another failing call opened it first
    now_open = item.opened_at is not None or item.failures >= threshold(circuit.provider)
    _remember(circuit, now_open)
    return now_open


def record_success(circuit: Circuit) -> None:
    """A call went through: the streak, if this function saw one, is over (no write otherwise)."""
    key = (circuit.pk, circuit.sk)
    with _lock:
        failed = _failed_here.pop(key, None)
    if failed is None:
        return
    bind()
    try:
        CircuitItem(circuit.pk, circuit.sk).update(
            actions=[CircuitItem.failures.set(0), CircuitItem.first_failure_at.remove()],
            condition=CircuitItem.opened_at.does_not_exist(),  # an open circuit is the probe's to close
        )
    except UpdateError as exc:
        if not condition_failed(exc):
            raise


# --- Parking --------------------------------------------------------------------------------------


class Parked(Exception):
    """The provider's circuit is open: the run waits on `wait` instead of calling it."""

    def __init__(self, wait: Wait) -> None:
        super().__init__(f"parked on {wait.interaction_id}")
        self.wait = wait


def park(tenant_id: str, run: Run, step: int, circuit: Circuit) -> Wait | None:
    """Park the run on the open circuit: its interaction (once per circuit opening: a retried Step finds
    it) and its place in the circuit's queue. None when a fresh read finds the circuit closed."""
    if not is_open(circuit, fresh=True):
        return None
    item = _item(circuit)
    opened = item.opened_at if item is not None and item.opened_at else utcnow()
    interaction_id = ids.derived_id("int", opened, run.run_id, circuit.sk, str(step))
    new = NewInteraction(
        interaction_id=interaction_id,
        run_id=run.run_id,
        session_id=run.session_id,
        listed_session_id=run.root_session_id,
        agent_id=run.agent_id,
        kind=PROVIDER_WAIT,
        step=step,
        tool_call_id="",
        tool_call_index=-1,
        tool_name="",
        arguments={"provider": circuit.provider, "key_owner": circuit.owner},
        digest="",
        timeout_seconds=WAIT_SECONDS,
    )
    interaction = stores().interactions.create(tenant_id, new)
    entry = {"tenant_id": tenant_id, "run_id": run.run_id, "interaction_id": interaction.interaction_id}
    _enqueue(circuit, {**entry, "parked_at": utcnow().isoformat()})
    return Wait(
        interaction_id=interaction.interaction_id,
        tool_call_id="",
        kind=PROVIDER_WAIT,
        timeout_seconds=interaction.timeout_seconds,
    )


def _enqueue(circuit: Circuit, entry: dict[str, Any]) -> None:
    """Add the run to the circuit's queue: one atomic list_append, however many runs park at once. A
    retried Step may add its entry twice; the second finds its interaction answered and is skipped."""
    bind()
    CircuitItem(circuit.pk, circuit.sk).update(
        actions=[CircuitItem.waiting.set((CircuitItem.waiting | []).append([entry]))]
    )


def paused_event(arguments: dict[str, Any], interaction_id: str) -> dict[str, Any]:
    """The `provider_paused` event's data (Await emits it once the token is stored)."""
    return {"interaction_id": interaction_id, **arguments}


# --- The sweep: probe, close, resume --------------------------------------------------------------


class CircuitReport(BaseModel):
    probed: int = 0
    closed: int = 0
    resumed: int = 0


Prober = Callable[[dict[str, Any]], bool]


def sweep(probe: Prober, *, now: datetime | None = None) -> CircuitReport:
    """Probe the circuits open long enough; resume the runs of closed ones, oldest first, bounded."""
    now = now or utcnow()
    report = CircuitReport()
    bind()
    for item in CircuitItem.scan(filter_condition=CircuitItem.quota.startswith("circuit#")):
        if item.opened_at is not None:
            if now - item.opened_at < timedelta(seconds=PROBE_AFTER_SECONDS) or not item.model:
                continue
            report.probed += 1
            if not probe(_probe_of(item)):
                continue
            if not _close(item):
                continue
            report.closed += 1
        report.resumed += _resume(item)
    if report.probed or report.resumed:
        logger.info("circuits", extra=report.model_dump())
    return report


def _probe_of(item: CircuitItem) -> dict[str, Any]:
    _, provider, *agent = item.quota.split("#")
    if item.tenant_id == DEPLOYMENT:
        return {"provider": provider, "owner": "deployment", "model": item.model}
    owner = {"owner": "agent", "agent_id": agent[0]} if agent else {"owner": "tenant"}
    return {"provider": provider, "model": item.model, "tenant_id": item.tenant_id, **owner}


def _close(item: CircuitItem) -> bool:
    try:
        item.update(
            actions=[
                CircuitItem.opened_at.remove(),
                CircuitItem.failures.set(0),
                CircuitItem.first_failure_at.remove(),
            ],
            condition=CircuitItem.opened_at == item.opened_at,
        )
    except UpdateError as exc:
        if condition_failed(exc):
            return False  # another sweep closed it
        raise
    with _lock:
        _open[(item.tenant_id, item.quota)] = (time.monotonic(), False)
    logger.info("circuit closed", extra={"circuit": item.quota, "owner": item.tenant_id})
    return True


def _resume(item: CircuitItem) -> int:
    """Resume up to RESUME_PER_SWEEP of the closed circuit's waiting runs, oldest first."""
    waiting = list(item.waiting or [])
    if item.opened_at is not None or not waiting:
        return 0
    now_resumed, rest = waiting[:RESUME_PER_SWEEP], waiting[RESUME_PER_SWEEP:]
    try:  # taken off the queue first: two sweeps never resume the same runs
        item.update(actions=[CircuitItem.waiting.set(rest)], condition=CircuitItem.waiting == waiting)
    except UpdateError as exc:
        if condition_failed(exc):
            return 0
        raise
    resumed = 0
    for entry in now_resumed:
        tenant_id, interaction_id = entry["tenant_id"], entry["interaction_id"]
        try:  # False: the run ended meanwhile (cancelled, a sync run that could not wait) or a duplicate
            if stores().interactions.answer(
                tenant_id, interaction_id, {"resumed": True}, key=None, by="circuit"
            ):
                answers.deliver(tenant_id, interaction_id)  # none yet: Await delivers when it stores it
                resumed += 1
        except NotFound:
            continue  # the run and its waits are gone
    return resumed


def probe_call(spec: dict[str, Any]) -> bool:
    """One minimal call of `spec["model"]` with the circuit's own key (in the Step function): True when
    the provider answered."""
    from stepwise.core.errors import StepError
    from stepwise.llm.client import complete
    from stepwise.settings import providers

    try:
        key = providers.key_of(spec.get("tenant_id"), spec.get("agent_id"), spec["owner"], spec["provider"])
        complete(
            model=spec["model"],
            messages=[{"role": "user", "content": "ping"}],
            tools=None,
            max_tokens=1,
            api_key=key,
        )
    except StepError as exc:
        logger.info("probe failed", extra={"provider": spec["provider"], "error": type(exc).__name__})
        return False
    return True


def probe_through_step(spec: dict[str, Any]) -> bool:
    """The reconciler's prober: invoke the Step function synchronously with a CircuitProbe."""
    import json

    from stepwise.core import aws

    response = aws.client("lambda").invoke(
        FunctionName=config.api_targets().step_function,
        Payload=json.dumps({"mode": "probe", "probe": spec}).encode(),
    )
    answer = json.loads(response["Payload"].read() or b"{}")
    return bool(isinstance(answer, dict) and answer.get("ok"))

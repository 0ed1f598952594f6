"""The effects ledger: a tool's side effect happens once, however often Lambda, Step Functions or a replay
asks for it (DESIGN.md, Principle 3).

What a tool declares decides how its calls go through the ledger:

- `none`: pure by construction. It just runs, every time; nothing is recorded.
- `idempotent`: the call's effect key is built from stable intent (see `effect_key`): tenant, agent, the
  run's trigger (a replay keeps its original's), tool, and the normalized values of the tool's
  `key_fields`. Model-written free text never goes in, so a replay that rewords an email still finds
  the key of the email it already sent.
- `undeclared` (the default, unsafe): the key is the call itself (tenant, run, step, tool call id), so a
  Step that Step Functions retries after a crash cannot run the call a second time; across runs nothing
  is deduplicated (stepwise.runs.replay refuses, unless forced, to replay a run that executed tools).

An entry moves through these statuses (one conditional write each, so exactly one caller wins):

    (none) ─claim→ claimed ─confirm→ done ─mark_undone→ undone ─claim→ claimed (generation + 1)
                     │ ├──release→ released ─claim→ claimed (generation + 1)
                     │ └──unknown→ unknown ─mark_undone→ undone
                     └──mark_undone→ undone        (a human asserts a crashed claim did not act)
    claimed | unknown ─confirm_done→ done               (a human checked that it did act)

A claim that finds the key `done` gets the stored result without the tool running (`deduplicated`); one
that finds it `claimed` or `unknown` gets an `effect_unknown` error, because the earlier attempt may or
may not have acted and only a human (or a compensating action) can tell. `undone` records that the
effect was reversed, so "already done" and "done, then undone" stay different: the latter may run again,
as a new generation. Every HTTP call carries an `Idempotency-Key` header derived from the entry and its
generation, so a provider that deduplicates does so too, even across a crash between its answer and our
confirm; a new generation gets a new header, so the provider does not answer a re-run with the undone
effect's cached response.

A person resolves a `claimed` or `unknown` entry through `POST /v1/effects/{key}/resolve`
(stepwise.ledger.review): `done` (it did act: later claims are answered `deduplicated`) or `undone` (it
did not, or was reversed: the next claim runs it again).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

from aws_lambda_powertools import Logger
from pydantic import BaseModel, ConfigDict

from stepwise.core.errors import Conflict, NotFound
from stepwise.core.masking import ARGUMENTS_LIMIT, mask_arguments
from stepwise.core.schema import rfc3339, utcnow
from stepwise.tools.base import ToolResult
from stepwise.tools.models import Effect

KEY_VERSION = 1  # part of every key: changing how keys are built must not collide with old entries
HEADER_PREFIX = "sw-"
RESULT_LIMIT = 100_000  # bytes of JSON a stored result may take (a DynamoDB item holds 400 KB)
INTENT_LIMIT = 8_000  # bytes of a key's intent an entry keeps
HISTORY_LIMIT = 20  # earlier generations kept on an entry, newest last

logger = Logger(service="stepwise")

Kind = Literal["effect", "call"]  # keyed on stable intent, or on the one tool call
Status = Literal["claimed", "done", "unknown", "undone", "released"]
Settlement = Literal["done", "unknown", "released"]

# The transitions, which the store turns into write conditions (a missing entry is claimable too).
CLAIMABLE: frozenset[str] = frozenset({"undone", "released"})
SETTLEABLE = "claimed"  # only the claim's own holder settles it, naming its generation
UNDOABLE: frozenset[str] = frozenset({"done", "claimed", "unknown"})
CONFIRMABLE: frozenset[str] = frozenset({"claimed", "unknown"})  # what a person may resolve as done


class KeyFieldError(ValueError):
    """The arguments do not carry the values that identify the effect's target."""


# --- Keys ----------------------------------------------------------------------------------------


class CallScope(BaseModel):
    """Where a tool call happens: injected by the runtime, never written by the model."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    agent_id: str
    run_id: str
    trigger_id: str  # what started the run; a replay keeps its original's
    step: int
    tool_call_id: str


class EffectKey(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: Kind
    digest: str  # sha256 of the canonical intent
    intent: dict[str, Any]  # what the digest is over, kept for the humans who read the ledger

    @property
    def id(self) -> str:
        """The entry's key in the ledger (and what `mark_undone` takes)."""
        return f"{self.kind}#{self.digest}"

    def recorded(self) -> dict[str, Any]:
        """The intent as the entry keeps it: key field values are the model's, so a huge one is cut
        (the digest is over all of it)."""
        text = canonical(self.intent)
        if len(text.encode()) <= INTENT_LIMIT:
            return self.intent
        return {**self.intent, "fields": {"truncated": text.encode()[:INTENT_LIMIT].decode(errors="ignore")}}


_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")


def normalize(value: Any) -> Any:
    """A key field's value in the form its key is built from.

    Strings are NFC-normalized and stripped of surrounding whitespace, and a string shaped like an email
    address (`local@domain.tld`, no whitespace) is lower-cased: mail systems treat addresses without
    regard to case, and a model that writes `Anna@Acme.com` once and `anna@acme.com` on a replay means
    one person. Nothing else is case-folded, because record ids, handles and paths are often
    case-sensitive, and merging two real targets would silently drop an effect. A float with an integral
    value becomes an int (`42.0` is `42`). Lists keep their order, objects are normalized value by value
    (with NFC keys) and serialized with sorted keys by `canonical`.
    """
    if isinstance(value, str):
        text = unicodedata.normalize("NFC", value).strip()
        return text.lower() if _EMAIL.fullmatch(text) else text
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise KeyFieldError(f"{value!r} cannot identify a target")
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {unicodedata.normalize("NFC", str(k)): normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [normalize(v) for v in value]
    raise KeyFieldError(f"a {type(value).__name__} is not a JSON value")


def canonical(value: Any) -> str:
    """JSON with sorted keys and no insignificant whitespace: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _digest(intent: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(intent).encode()).hexdigest()


_MISSING = object()


def _field(arguments: dict[str, Any], name: str) -> Any:
    """An argument by name, or by dotted path into nested objects (`recipient.email`)."""
    if name in arguments:
        return arguments[name]
    value: Any = arguments
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def effect_key(
    scope: CallScope,
    tool_name: str,
    key_fields: list[str],
    arguments: dict[str, Any],
    private: Collection[str] = (),
) -> EffectKey:
    """The key of an idempotent tool's effect: "have I already done this, for this reason, to this target?"

    Raises KeyFieldError when a key field is missing, null or blank: without it the call has no
    identity, and guessing one could either duplicate or drop an effect. A tool declared idempotent with
    no key fields acts once per trigger. A `private` key field (a memory's content) enters the intent as
    the sha256 of its normalized value: the key still tells equal values apart, and the entry, which
    outlives what it protects, keeps no copy of the value.
    """
    fields: dict[str, Any] = {}
    missing = []
    for name in sorted(set(key_fields)):
        value = _field(arguments, name)
        normal = None if value is _MISSING else normalize(value)
        if normal is None or normal == "":
            missing.append(name)
        elif name in private:
            normal = {"sha256": hashlib.sha256(canonical(normal).encode()).hexdigest()}
        fields[name] = normal
    if missing:
        raise KeyFieldError(
            f"{tool_name} identifies its target by {', '.join(missing)}: give "
            f"{'it' if len(missing) == 1 else 'them'} a value"
        )
    intent = {
        "v": KEY_VERSION,
        "kind": "effect",
        "tenant": scope.tenant_id,
        "agent": scope.agent_id,
        "trigger": scope.trigger_id,
        "tool": tool_name,
        "fields": fields,
    }
    return EffectKey(kind="effect", digest=_digest(intent), intent=intent)


def call_key(scope: CallScope, tool_name: str) -> EffectKey:
    """The key of one tool call: a retried Step finds it, nothing else does."""
    intent = {
        "v": KEY_VERSION,
        "kind": "call",
        "tenant": scope.tenant_id,
        "run": scope.run_id,
        "step": scope.step,
        "tool_call": scope.tool_call_id,
        "tool": tool_name,
    }
    return EffectKey(kind="call", digest=_digest(intent), intent=intent)


def public_key(key: str) -> str:
    """An entry's key as the API shows it and takes it in a path: `effect:<sha256>` (a "#" cannot be in
    a URL path; the stored `effect#<sha256>` stays the table's sort key)."""
    return key.replace("#", ":", 1)


def ledger_key(public: str) -> str:
    """The stored key of an entry named either way (`effect:<sha256>` or `effect#<sha256>`)."""
    return public.replace(":", "#", 1)


def idempotency_header(key: EffectKey, generation: int) -> str:
    """The `Idempotency-Key` an HTTP tool sends: stable across retries of one generation of an entry,
    new for the next (a re-run after `undone` must not be answered from the provider's cache)."""
    return HEADER_PREFIX + hashlib.sha256(f"{key.id}#{generation}".encode()).hexdigest()[:32]


# --- What a failure says about the effect ---------------------------------------------------------

# call_http_tool's failure codes. `released`: the request certainly did not act, so the claim is given
# back and a later attempt may run. `unknown`: it may have acted, so the key stays blocked until a human
# decides. A code not listed here (a new tool kind's) cannot prove nothing happened: unknown.
FAILURE_RULES: dict[str, Settlement] = {
    "invalid_arguments": "released",  # refused by the schema or the JSON encoder, before any request
    "invalid_tool": "released",  # the tool's own schema or headers are unusable, before any request
    "invalid_endpoint": "released",  # the endpoint URL cannot be requested at all
    # Refused by the SSRF guard before it connects. (A redirect to a refused address comes after the
    # first hop answered, but a redirect is not a fulfilled request, and a tool that redirects into the
    # internal network is not one whose delivery we vouch for.)
    "blocked_destination": "released",
    "unreachable": "unknown",  # connect failures are released by `settlement`; a dropped connection is not
    "timeout": "unknown",  # the request may have been sent, and acted on, before the answer was late
    "http_error": "unknown",  # a 4xx is released by `settlement`; a 5xx or a broken exchange is not
    # The memory builtins' refusals: each is decided by a conditional write that did not happen.
    "memory_full": "released",
    "memory_not_found": "released",
    "memory_unavailable": "released",
    "embedding_unavailable": "released",  # the save stopped before its write
}
# call_http_tool folds connect-phase failures (nothing was sent) and connections lost mid-exchange into
# `unreachable`; these are the texts only the connect phase produces ("cannot resolve" is the SSRF
# guard's resolver). Anything else stays unknown.
_CONNECT_FAILURES = re.compile(
    r"could not reach the endpoint: "
    r"(cannot resolve |.*(Connection refused|Network is unreachable|No route to host))"
)
_HTTP_STATUS = re.compile(r"^HTTP (\d{3}):")


def settlement(result: ToolResult) -> Settlement:
    """What a claim becomes once its tool returned `result` (see FAILURE_RULES)."""
    if result.error is None:
        return "done"
    code, message = result.error.code, result.error.message
    if code == "unreachable" and _CONNECT_FAILURES.search(message):
        return "released"
    if code == "http_error":
        status = _HTTP_STATUS.match(message)
        # The endpoint answered that it refused the request (HTTP's client errors), so it did not act.
        if status and 400 <= int(status.group(1)) < 500:
            return "released"
    return FAILURE_RULES.get(code, "unknown")


def stored(result: ToolResult) -> tuple[dict[str, Any], bool]:
    """The result as the ledger keeps it, and whether it had to be cut to fit an item."""
    dumped = result.model_dump(mode="json")
    if len(canonical(dumped).encode()) <= RESULT_LIMIT:
        return dumped, False
    marker = f"\n…[truncated: the ledger keeps {RESULT_LIMIT} bytes of a result]"
    text = result.error.message if result.error else result.for_model(limit=None)
    cut = text.encode()[: RESULT_LIMIT - 1_000].decode(errors="ignore") + marker
    short = ToolResult.failure(result.error.code, cut) if result.error else ToolResult(output=cut)
    # The images a call returned stay referenced (they are stored under the run, not in the entry).
    return short.model_copy(update={"files": result.files}).model_dump(mode="json"), True


# --- Entries and the store that keeps them ---------------------------------------------------------


class Entry(BaseModel):
    """One effect key's record: its current generation's claim and outcome, and earlier generations."""

    key: str
    kind: Kind
    tool_name: str
    status: Status
    generation: int
    run_id: str  # who claimed the current generation
    tool_call_id: str
    claimed_at: datetime
    settled_at: datetime | None = None
    result: dict[str, Any] | None = None  # a ToolResult; for `unknown`, the failure that left it unknown
    result_truncated: bool = False
    undone_at: datetime | None = None
    undone_by: str | None = None
    history: list[dict[str, Any]] = []
    arguments: dict[str, Any] | None = None  # the current generation's call, masked (`recorded_arguments`)
    # A person's word on the current generation: {outcome, by, at, note, was} (stepwise.ledger.review).
    resolution: dict[str, Any] | None = None


def recorded_arguments(arguments: dict[str, Any], private: Sequence[str] = ()) -> dict[str, Any]:
    """A call's arguments as its entry keeps them for the person who may have to resolve it: secrets
    masked, private key fields left out (the key keeps only their digest: a memory's text must go when
    its user is forgotten, and entries outlive that), and cut to ARGUMENTS_LIMIT characters of JSON (an
    entry is an item, paid per KB written)."""
    masked = mask_arguments({name: value for name, value in arguments.items() if name not in private})
    if not isinstance(masked, dict):
        return {}
    text = canonical(masked)
    return masked if len(text) <= ARGUMENTS_LIMIT else {"truncated": text[:ARGUMENTS_LIMIT]}


class Claim(BaseModel):
    won: bool  # True: the caller holds the entry's new generation and may act
    entry: Entry


class LedgerStore(Protocol):
    """Where entries live (stepwise.ledger.store in DynamoDB); every write is conditional."""

    def claim(
        self,
        tenant_id: str,
        key: EffectKey,
        tool_name: str,
        run_id: str,
        tool_call_id: str,
        arguments: dict[str, Any] | None = None,
    ) -> Claim:
        """Create the entry, or take a claimable one as the next generation; else report the entry."""
        ...

    def settle(
        self,
        tenant_id: str,
        key: str,
        generation: int,
        to: Settlement,
        result: dict[str, Any] | None,
        truncated: bool,
    ) -> bool:
        """Move a `claimed` entry of this generation to `to`; False when it is no longer that claim."""
        ...

    def get(self, tenant_id: str, key: str) -> Entry | None: ...

    def write_undone(self, tenant_id: str, key: str, undone: Entry, *, was: Entry) -> bool:
        """Write `undone`'s status, undo fields and history over the entry, only while its status and
        generation are still `was`'s; False when it moved meanwhile."""
        ...

    def write_done(self, tenant_id: str, key: str, done: Entry, *, was: Entry) -> bool:
        """Write `done`'s status, result and resolution over the entry, only while its status and
        generation are still `was`'s; False when it moved meanwhile."""
        ...


UNDO_ATTEMPTS = 3  # an entry that changes under us this often is being fought over; report what it is


def undone(entry: Entry, by: str, at: datetime, note: str | None = None) -> Entry:
    """The entry once its effect is reversed: `undone`, with this generation's summary kept in its
    history (the newest HISTORY_LIMIT), so the next claim starts a new generation."""
    summary = {
        "generation": entry.generation,
        "status": entry.status,
        "run_id": entry.run_id,
        "tool_call_id": entry.tool_call_id,
        "claimed_at": rfc3339(entry.claimed_at),
        "settled_at": rfc3339(entry.settled_at) if entry.settled_at else None,
        "undone_at": rfc3339(at),
        "undone_by": by,
    }
    if note:
        summary["note"] = note
    history = [*entry.history, summary][-HISTORY_LIMIT:]
    update = {
        "status": "undone",
        "undone_at": at,
        "undone_by": by,
        "history": history,
        "resolution": _resolution("undone", entry, by, at, note),
    }
    return entry.model_copy(update=update)


def _resolution(outcome: str, entry: Entry, by: str, at: datetime, note: str | None) -> dict[str, Any]:
    return {"outcome": outcome, "by": by, "at": at.isoformat(), "note": note, "was": entry.status}


def confirmed(entry: Entry, by: str, at: datetime, note: str | None = None) -> Entry:
    """The entry once a person checked that its effect did happen: `done`, with a result that says so,
    which is what a later claim (a replay) answers `deduplicated` with. What the attempt itself left
    (the failure that made it unknown) stays in the resolution."""
    said = f"; their note: {note}" if note else ""
    result = ToolResult(
        output=f"{entry.tool_name}: done (an earlier attempt's outcome, confirmed by {by} at "
        f"{at.isoformat(timespec='seconds')}{said}). It was not run again."
    )
    resolution = {**_resolution("done", entry, by, at, note), "left": entry.result}
    update = {
        "status": "done",
        "settled_at": at,
        "result": result.model_dump(mode="json"),
        "result_truncated": False,
        "resolution": resolution,
    }
    return entry.model_copy(update=update)


def confirm_done(tenant_id: str, key: str, by: str, *, store: LedgerStore, note: str | None = None) -> Entry:
    """A person checked that a claim left `claimed` or `unknown` did act: later claims are answered
    with a result saying so (`deduplicated`), never a second run.

    Raises NotFound for a key the tenant has no entry for, Conflict for one not awaiting a word.
    Confirm a `claimed` entry only once its call is over, as for mark_undone.
    """
    for _ in range(UNDO_ATTEMPTS):
        entry = store.get(tenant_id, key)
        if entry is None:
            raise NotFound(f"no ledger entry {key}", code="effect_not_found")
        if entry.status not in CONFIRMABLE:
            raise Conflict(
                f"ledger entry {key} is {entry.status}: only a claimed or unknown one can be resolved done",
                code="effect_not_resolvable",
            )
        after = confirmed(entry, by, utcnow(), note)
        if store.write_done(tenant_id, key, after, was=entry):
            return after
    raise Conflict(f"ledger entry {key} keeps changing; try again", code="effect_contended")


def mark_undone(tenant_id: str, key: str, by: str, *, store: LedgerStore, note: str | None = None) -> Entry:
    """A compensating action happened (the email was retracted, the charge refunded), or a human checked
    that a claim left unknown never acted: the next attempt runs again, as a new generation.

    Raises NotFound for a key the tenant has no entry for, Conflict for one with nothing to undo.
    Undo a `claimed` entry only once its call is over: a call still running would act regardless.
    """
    for _ in range(UNDO_ATTEMPTS):
        entry = store.get(tenant_id, key)
        if entry is None:
            raise NotFound(f"no ledger entry {key}", code="effect_not_found")
        if entry.status not in UNDOABLE:
            raise Conflict(
                f"ledger entry {key} is {entry.status}: nothing to undo", code="effect_not_undoable"
            )
        after = undone(entry, by, utcnow(), note)
        if store.write_undone(tenant_id, key, after, was=entry):
            return after
    raise Conflict(f"ledger entry {key} keeps changing; try again", code="effect_contended")


# --- A call through the ledger ---------------------------------------------------------------------


class Declared(Protocol):
    """What the ledger reads off a tool."""

    @property
    def name(self) -> str: ...
    @property
    def effect(self) -> Effect: ...
    @property
    def key_fields(self) -> list[str]: ...


class Guarded(BaseModel):
    """A call's result, and how the ledger came by it."""

    result: ToolResult
    key: str | None = None  # the ledger entry, when there is one
    generation: int | None = None
    deduplicated: bool = False  # the result is an earlier call's, stored; the tool did not run

    def flags(self) -> dict[str, Any]:
        """What the `tool_result` event adds when the ledger, not the tool, answered."""
        if self.deduplicated:
            return {"deduplicated": True, "effect_key": self.key, "generation": self.generation}
        if self.result.error is not None and self.result.error.code == "effect_unknown":
            return {"effect_key": self.key}
        return {}


def unknown_outcome(entry: Entry, scope: CallScope) -> ToolResult:
    """What a call learns when an earlier attempt holds the key without a clear outcome."""
    since = entry.claimed_at.isoformat(timespec="seconds")
    if entry.status == "unknown":
        reason = (entry.result or {}).get("error") or {}
        what = (
            f"an earlier attempt (run {entry.run_id}, {since}) ended without a clear outcome "
            f"({reason.get('code', 'error')}: {reason.get('message', 'no detail')})"
        )
    elif (entry.run_id, entry.tool_call_id) == (scope.run_id, scope.tool_call_id):
        what = f"this call started at {since} and its step was retried before the outcome was recorded"
    else:
        what = (
            f"another call (run {entry.run_id}, tool call {entry.tool_call_id}) started it at {since} and "
            "has not recorded an outcome: it may still be running, or it crashed"
        )
    return ToolResult.failure(
        "effect_unknown",
        f"{entry.tool_name}: {what}. The effect may or may not have happened, so it is not run again. "
        f"Do not assume either way; a human can check, and resolve ledger entry {public_key(entry.key)} "
        "(POST /v1/effects/{key}/resolve) as done or undone.",
    )


def guard(
    scope: CallScope,
    tool: Declared,
    arguments: dict[str, Any],
    run: Callable[[str], ToolResult],
    store: LedgerStore,
    *,
    before_act: Callable[[], None] | None = None,
) -> Guarded:
    """Run `tool` once for its key: `run` gets the Idempotency-Key to send and does the call.

    A crash between `run` returning and the settle leaves the entry `claimed`; whoever claims it next
    gets `effect_unknown`, never a second run. `before_act` is called once the claim is won and
    before the tool acts; if it raises, nothing acted, so the claim is released (the next claim takes
    it as a new generation) and the error goes on.
    """
    if tool.effect == "none":
        if before_act is not None:
            before_act()
        return Guarded(result=run(idempotency_header(call_key(scope, tool.name), 1)))
    try:
        # Only builtins declare private key fields; other tools have no such attribute.
        private = getattr(tool, "private_key_fields", ())
        key = (
            effect_key(scope, tool.name, tool.key_fields, arguments, private)
            if tool.effect == "idempotent"
            else call_key(scope, tool.name)
        )
    except KeyFieldError as exc:
        return Guarded(result=ToolResult.failure("invalid_arguments", str(exc)))
    ledger = store
    claim = ledger.claim(
        scope.tenant_id,
        key,
        tool.name,
        scope.run_id,
        scope.tool_call_id,
        recorded_arguments(arguments, private),
    )
    entry = claim.entry
    if not claim.won:
        if entry.status == "done" and entry.result is not None:
            return Guarded(
                result=ToolResult.model_validate(entry.result),
                key=key.id,
                generation=entry.generation,
                deduplicated=True,
            )
        return Guarded(result=unknown_outcome(entry, scope), key=key.id, generation=entry.generation)

    if before_act is not None:
        try:
            before_act()
        except BaseException:
            try:
                ledger.settle(scope.tenant_id, key.id, entry.generation, "released", None, False)
            except Exception:  # left claimed, it answers effect_unknown: safe, if not kind
                logger.exception("could not release ledger entry %s after its call did not act", key.id)
            raise
    result = run(idempotency_header(key, entry.generation))
    to = settlement(result)
    kept, truncated = stored(result)  # a released or unknown entry keeps the failure, for the humans
    if not ledger.settle(scope.tenant_id, key.id, entry.generation, to, kept, truncated):
        # Someone marked the claim undone while the call ran: the ledger keeps their word, the model
        # still gets what the tool answered.
        logger.warning("ledger entry %s changed while its call ran; %s not recorded", key.id, to)
    return Guarded(result=result, key=key.id, generation=entry.generation)

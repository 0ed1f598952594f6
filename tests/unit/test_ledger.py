"""The effects ledger's pure parts: keys from stable intent, the rule per failure, and an entry's statuses
driven through `guard` against an in-memory store that applies the same transition rules as DynamoDB's
conditional writes (tests/integration/test_effects.py runs the real store)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from stepwise import ledger
from stepwise.core.errors import Conflict, NotFound
from stepwise.ledger import (
    CallScope,
    KeyFieldError,
    call_key,
    effect_key,
    guard,
    idempotency_header,
    normalize,
    settlement,
)
from stepwise.tools.base import ToolResult
from stepwise.tools.models import HttpTool
from tests.fakes.stores import FakeLedger

SCOPE = CallScope(
    tenant_id="t1", agent_id="agt_1", run_id="run_1", trigger_id="event:42", step=1, tool_call_id="call_a"
)


@dataclass
class Endpoint:
    """Stands in for the tool's endpoint: counts calls, records the Idempotency-Key of each."""

    answer: ToolResult = field(default_factory=lambda: ToolResult(output={"sent": True}))
    headers: list[str] = field(default_factory=list)

    def __call__(self, idempotency_key: str) -> ToolResult:
        self.headers.append(idempotency_key)
        return self.answer

    @property
    def calls(self) -> int:
        return len(self.headers)


class Crash(Exception):
    """The Lambda dies after the effect, before the ledger hears of it."""


def crash_after(endpoint: Endpoint) -> Callable[[str], ToolResult]:
    def run(idempotency_key: str) -> ToolResult:
        endpoint(idempotency_key)
        raise Crash

    return run


def send_tool(effect: str = "idempotent", key_fields: list[str] | None = None) -> HttpTool:
    return HttpTool.model_validate(
        {
            "type": "http",
            "name": "send_email",
            "description": "send an email",
            "input_schema": {"type": "object"},
            "endpoint": "https://mail.example/send",
            "effect": effect,
            "key_fields": (["to"] if key_fields is None else key_fields) if effect == "idempotent" else [],
        }
    )


def scope(**changes: Any) -> CallScope:
    return SCOPE.model_copy(update=changes)


# --- Normalization and keys ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("Anna@Acme.com", "anna@acme.com"),  # email-shaped: case-insensitive
        ("  anna@acme.com\n", "anna@acme.com"),  # surrounding whitespace
        ("Cafe\u0301", "Café"),  # NFD and NFC spell the same text
        (42.0, 42),  # an integral float is an int
        ({"b": 1, "a": "x "}, {"a": "x", "b": 1}),  # objects: order and whitespace of values
    ],
)
def test_equal_intents_normalize_alike(one: Any, other: Any) -> None:
    assert ledger.canonical(normalize(one)) == ledger.canonical(normalize(other))


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("REC-001Ab", "REC-001aB"),  # ids are often case-sensitive: only email-shaped strings fold
        (["a", "b"], ["b", "a"]),  # list order is meaning
        ("1", 1),  # a string is not a number
        (True, 1),
    ],
)
def test_different_intents_stay_different(one: Any, other: Any) -> None:
    assert ledger.canonical(normalize(one)) != ledger.canonical(normalize(other))


def test_a_non_finite_number_cannot_identify_a_target() -> None:
    with pytest.raises(KeyFieldError):
        normalize(float("nan"))


def test_the_effect_key_ignores_model_written_text() -> None:
    first = effect_key(SCOPE, "send_email", ["to"], {"to": "anna@acme.com", "body": "Hi Anna, following up"})
    replay = effect_key(
        scope(run_id="run_2", tool_call_id="call_z", step=3),
        "send_email",
        ["to"],
        {"to": " Anna@Acme.com", "body": "Hello Anna, about your quote", "subject": "Your quote"},
    )

    assert first.id == replay.id
    assert re.fullmatch(r"effect#[0-9a-f]{64}", first.id)
    assert first.intent["fields"] == {"to": "anna@acme.com"}
    assert first.intent["trigger"] == "event:42" and "body" not in str(first.intent)


@pytest.mark.parametrize(
    "change",
    [
        {"tenant_id": "t2"},
        {"agent_id": "agt_2"},
        {"trigger_id": "event:43"},
    ],
)
def test_the_effect_key_is_scoped_to_tenant_agent_and_trigger(change: dict[str, Any]) -> None:
    arguments = {"to": "anna@acme.com"}

    assert (
        effect_key(SCOPE, "send_email", ["to"], arguments).id
        != effect_key(scope(**change), "send_email", ["to"], arguments).id
    )


def test_the_effect_key_depends_on_tool_and_key_field_values_only() -> None:
    base = effect_key(SCOPE, "send_email", ["to", "cc"], {"to": "a@x.io", "cc": "b@x.io"})

    assert base.id == effect_key(SCOPE, "send_email", ["cc", "to"], {"cc": "b@x.io", "to": "a@x.io"}).id
    assert base.id != effect_key(SCOPE, "send_email", ["to", "cc"], {"to": "a@x.io", "cc": "c@x.io"}).id
    assert base.id != effect_key(SCOPE, "send_sms", ["to", "cc"], {"to": "a@x.io", "cc": "b@x.io"}).id


def test_key_fields_may_name_nested_arguments() -> None:
    key = effect_key(
        SCOPE, "send_email", ["recipient.email"], {"recipient": {"email": "A@X.io", "name": "A"}}
    )

    assert key.intent["fields"] == {"recipient.email": "a@x.io"}


@pytest.mark.parametrize("arguments", [{}, {"to": None}, {"to": "   "}, {"recipient": "a@x.io"}])
def test_a_missing_key_field_is_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(KeyFieldError, match="identifies its target by to"):
        effect_key(SCOPE, "send_email", ["to"], arguments)


def test_idempotent_without_key_fields_means_once_per_trigger() -> None:
    assert effect_key(SCOPE, "post_digest", [], {"text": "a"}).id == (
        effect_key(scope(run_id="run_9"), "post_digest", [], {"text": "b"}).id
    )


def test_a_call_key_is_the_one_tool_call() -> None:
    key = call_key(SCOPE, "send_email")

    assert key.id.startswith("call#") and key.id == call_key(SCOPE, "send_email").id
    assert key.id != call_key(scope(tool_call_id="call_b"), "send_email").id
    assert key.id != call_key(scope(step=2), "send_email").id
    assert key.id != call_key(scope(run_id="run_2"), "send_email").id  # a replay is not a retry


def test_the_idempotency_header_is_stable_per_generation() -> None:
    key = effect_key(SCOPE, "send_email", ["to"], {"to": "a@x.io"})
    header = idempotency_header(key, 1)

    assert re.fullmatch(r"sw-[0-9a-f]{32}", header)
    assert header == idempotency_header(key, 1)
    assert header != idempotency_header(key, 2)
    assert header != idempotency_header(call_key(SCOPE, "send_email"), 1)


def test_a_huge_key_value_is_cut_in_the_record_not_in_the_digest() -> None:
    huge = effect_key(SCOPE, "send_email", ["to"], {"to": "x" * 50_000})
    other = effect_key(SCOPE, "send_email", ["to"], {"to": "x" * 49_999 + "y"})

    assert len(ledger.canonical(huge.recorded()).encode()) < ledger.INTENT_LIMIT + 500
    assert huge.id != other.id


# --- What a failure says about the effect -----------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "message", "expected"),
    [
        ("invalid_arguments", "to: 'x' is not of type 'integer'", "released"),
        ("invalid_tool", "send: input_schema has an unresolvable $ref", "released"),
        ("invalid_endpoint", "send: the endpoint URL is not usable", "released"),
        ("blocked_destination", "destination '10.0.0.1' is not allowed", "released"),
        ("unreachable", "send: could not reach the endpoint: [Errno 111] Connection refused", "released"),
        ("unreachable", "send: could not reach the endpoint: cannot resolve 'nx.example': ...", "released"),
        (
            "unreachable",
            "send: could not reach the endpoint: Server disconnected without a response",
            "unknown",
        ),
        (
            "unreachable",
            "send: could not reach the endpoint: [Errno 104] Connection reset by peer",
            "unknown",
        ),
        ("timeout", "send: no response within 30 seconds", "unknown"),
        ("http_error", 'HTTP 400: {"error": "bad address"}', "released"),
        ("http_error", "HTTP 429: slow down", "released"),
        ("http_error", "HTTP 500: boom", "unknown"),
        ("http_error", "HTTP 503: ", "unknown"),
        ("http_error", "send: the endpoint redirected too many times", "unknown"),
        ("some_new_code", "whatever", "unknown"),
    ],
)
def test_the_rule_per_failure(code: str, message: str, expected: str) -> None:
    assert settlement(ToolResult.failure(code, message)) == expected


def test_success_is_done() -> None:
    assert settlement(ToolResult(output="ok")) == "done"


def test_a_big_result_is_cut_to_fit_an_item() -> None:
    kept, truncated = ledger.stored(ToolResult(output="é" * 200_000))

    assert truncated
    assert len(ledger.canonical(kept).encode()) <= ledger.RESULT_LIMIT
    assert "truncated" in kept["output"]
    assert ledger.stored(ToolResult(output={"id": 1})) == (
        {"output": {"id": 1}, "error": None, "files": []},
        False,
    )


# --- An entry's statuses, through guard ------------------------------------------------------------


def test_done_returns_the_stored_result_without_running() -> None:
    store, endpoint = FakeLedger(), Endpoint(answer=ToolResult(output={"message_id": "m1"}))
    arguments = {"to": "anna@acme.com", "body": "first draft"}

    first = guard(SCOPE, send_tool(), arguments, endpoint, store)
    again = guard(
        scope(run_id="run_2"), send_tool(), {"to": "Anna@acme.com", "body": "redraft"}, endpoint, store
    )

    assert endpoint.calls == 1
    assert first.result.output == again.result.output == {"message_id": "m1"}
    assert not first.deduplicated and again.deduplicated
    assert again.flags() == {"deduplicated": True, "effect_key": first.key, "generation": 1}
    assert store.entries[("t1", str(first.key))].status == "done"


def test_a_crash_between_effect_and_confirm_leaves_the_outcome_unknown() -> None:
    store, endpoint = FakeLedger(), Endpoint()
    arguments = {"to": "anna@acme.com"}

    with pytest.raises(Crash):
        guard(SCOPE, send_tool(), arguments, crash_after(endpoint), store)
    retried = guard(SCOPE, send_tool(), arguments, endpoint, store)  # Step Functions retries the Gate
    replayed = guard(scope(run_id="run_2"), send_tool(), arguments, endpoint, store)

    assert endpoint.calls == 1
    for outcome in (retried, replayed):
        assert outcome.result.error is not None and outcome.result.error.code == "effect_unknown"
        assert "may or may not have happened" in outcome.result.error.message
        assert outcome.flags() == {"effect_key": outcome.key}
    assert retried.result.error and "retried" in retried.result.error.message
    assert replayed.result.error and "another call" in replayed.result.error.message


def test_an_ambiguous_failure_blocks_the_key_and_says_why() -> None:
    store = FakeLedger()
    timed_out = Endpoint(answer=ToolResult.failure("timeout", "send_email: no response within 30 seconds"))

    first = guard(SCOPE, send_tool(), {"to": "a@x.io"}, timed_out, store)
    later = guard(scope(run_id="run_2"), send_tool(), {"to": "a@x.io"}, Endpoint(), store)

    assert first.result.error and first.result.error.code == "timeout"  # the model sees what happened
    assert store.entries[("t1", str(first.key))].status == "unknown"
    assert later.result.error and later.result.error.code == "effect_unknown"
    assert "timeout: send_email: no response" in later.result.error.message


def test_a_failure_that_did_not_act_releases_the_key() -> None:
    store = FakeLedger()
    refused = Endpoint(
        answer=ToolResult.failure("unreachable", "x: could not reach the endpoint: Connection refused")
    )
    working = Endpoint()

    guard(SCOPE, send_tool(), {"to": "a@x.io"}, refused, store)
    retry = guard(scope(step=2, tool_call_id="call_b"), send_tool(), {"to": "a@x.io"}, working, store)

    assert working.calls == 1 and retry.result.ok and retry.generation == 2
    assert refused.headers[0] != working.headers[0]  # a provider that cached the refusal will not replay it


def test_done_then_undone_runs_again_as_a_new_generation() -> None:
    store, endpoint = FakeLedger(), Endpoint()
    first = guard(SCOPE, send_tool(), {"to": "a@x.io"}, endpoint, store)

    undone = ledger.mark_undone("t1", str(first.key), "ops@acme.com", store=store)
    again = guard(scope(run_id="run_2"), send_tool(), {"to": "a@x.io"}, endpoint, store)
    after = guard(scope(run_id="run_3"), send_tool(), {"to": "a@x.io"}, endpoint, store)

    assert undone.status == "undone" and undone.undone_by == "ops@acme.com"
    assert endpoint.calls == 2 and not again.deduplicated and after.deduplicated
    assert len(set(endpoint.headers)) == 2
    entry = store.entries[("t1", str(first.key))]
    assert (entry.status, entry.generation) == ("done", 2)
    assert [h["generation"] for h in entry.history] == [1]


def test_a_crashed_claim_may_be_marked_undone_by_a_human() -> None:
    store, endpoint = FakeLedger(), Endpoint()
    with pytest.raises(Crash):
        guard(SCOPE, send_tool(), {"to": "a@x.io"}, crash_after(endpoint), store)
    key = effect_key(SCOPE, "send_email", ["to"], {"to": "a@x.io"}).id

    ledger.mark_undone("t1", key, "ops", store=store)
    again = guard(scope(run_id="run_2"), send_tool(), {"to": "a@x.io"}, endpoint, store)

    assert again.result.ok and endpoint.calls == 2


def test_only_a_held_key_can_be_undone() -> None:
    store = FakeLedger()
    first = guard(SCOPE, send_tool(), {"to": "a@x.io"}, Endpoint(), store)
    ledger.mark_undone("t1", str(first.key), "ops", store=store)

    with pytest.raises(Conflict):
        ledger.mark_undone("t1", str(first.key), "ops", store=store)
    with pytest.raises(NotFound):
        ledger.mark_undone("t1", "effect#nope", "ops", store=store)
    with pytest.raises(NotFound):
        ledger.mark_undone("t2", str(first.key), "ops", store=store)  # another tenant's entry


def test_an_undo_during_the_call_wins_over_its_confirm() -> None:
    store, endpoint = FakeLedger(), Endpoint()
    key = effect_key(SCOPE, "send_email", ["to"], {"to": "a@x.io"}).id

    def undo_midway(idempotency_key: str) -> ToolResult:
        ledger.mark_undone("t1", key, "ops", store=store)
        return endpoint(idempotency_key)

    outcome = guard(SCOPE, send_tool(), {"to": "a@x.io"}, undo_midway, store)

    assert outcome.result.ok
    assert store.entries[("t1", key)].status == "undone"


def test_effect_none_runs_every_time_and_records_nothing() -> None:
    store, endpoint = FakeLedger(), Endpoint()

    for _ in range(2):
        outcome = guard(SCOPE, send_tool("none"), {"to": "a@x.io"}, endpoint, store)
        assert outcome.result.ok and outcome.key is None

    assert endpoint.calls == 2 and store.entries == {}
    assert endpoint.headers[0] == idempotency_header(call_key(SCOPE, "send_email"), 1)


def test_an_undeclared_call_runs_once_per_tool_call() -> None:
    store, endpoint = FakeLedger(), Endpoint()
    tool = send_tool("undeclared")

    with pytest.raises(Crash):
        guard(SCOPE, tool, {"to": "a@x.io"}, crash_after(endpoint), store)
    retried = guard(SCOPE, tool, {"to": "a@x.io"}, endpoint, store)
    next_call = guard(scope(tool_call_id="call_b"), tool, {"to": "a@x.io"}, endpoint, store)

    assert retried.result.error and retried.result.error.code == "effect_unknown"
    assert next_call.result.ok and endpoint.calls == 2
    assert endpoint.headers[1] == idempotency_header(call_key(scope(tool_call_id="call_b"), "send_email"), 1)


def test_an_undeclared_call_confirmed_before_a_crash_answers_from_the_ledger() -> None:
    store, endpoint = FakeLedger(), Endpoint(answer=ToolResult(output="sent"))
    tool = send_tool("undeclared")

    guard(SCOPE, tool, {}, endpoint, store)  # the Gate dies after this, before storing the result
    retried = guard(SCOPE, tool, {}, endpoint, store)

    assert retried.deduplicated and retried.result.output == "sent" and endpoint.calls == 1


def test_a_call_without_its_key_fields_neither_claims_nor_runs() -> None:
    store, endpoint = FakeLedger(), Endpoint()

    outcome = guard(SCOPE, send_tool(), {"body": "hi"}, endpoint, store)

    assert outcome.result.error and outcome.result.error.code == "invalid_arguments"
    assert endpoint.calls == 0 and store.entries == {}


def test_a_failure_before_the_act_releases_the_claim_and_the_retry_acts() -> None:
    """`before_act` (the Step: its calls' events must be in the log) fails after the claim is won:
    nothing acted, so the claim is released and the retry acts, as a new generation."""
    store, endpoint = FakeLedger(), Endpoint()
    arguments = {"to": "anna@acme.com"}

    def log_unavailable() -> None:
        raise Crash

    with pytest.raises(Crash):
        guard(SCOPE, send_tool(), arguments, endpoint, store, before_act=log_unavailable)
    assert endpoint.calls == 0
    retried = guard(SCOPE, send_tool(), arguments, endpoint, store, before_act=lambda: None)

    assert endpoint.calls == 1 and retried.result.output == {"sent": True}
    entry = store.entries[("t1", str(retried.key))]
    assert (entry.status, entry.generation) == ("done", 2)

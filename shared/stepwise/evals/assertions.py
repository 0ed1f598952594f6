"""Each assertion of a case, held against what its run did: pure functions of the run's outcome (the
judge's verdict is handed in), so every kind is unit-tested without a stack."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from stepwise.evals.suites import (
    AssertContains,
    Assertion,
    AssertJsonSchema,
    AssertJudge,
    AssertMaxCost,
    AssertMaxInputTokens,
    AssertMaxSteps,
    AssertNoDivergence,
    AssertNotContains,
    AssertRegex,
    AssertToolTrajectory,
    ExpectedToolCall,
)

REASON_LIMIT = 500  # characters of one reason kept in the result


@dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]


@dataclass
class Outcome:
    """What a case's run did, as the assertions read it."""

    run_id: str
    status: str
    answer: str | None
    steps: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    calls: list[Call] = field(default_factory=list)
    divergences: int = 0
    expected_calls: list[ExpectedToolCall] | None = None  # the case's, else its recorded run's
    message: str = ""  # what the run was asked (the judge reads it beside the answer)


class AssertionResult(BaseModel):
    type: str
    passed: bool
    reason: str
    score: float | None = None


class Verdict(BaseModel):
    """What a judge answers, the JSON schema it is held to."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    passed: bool = Field(alias="pass")
    score: float = Field(ge=0, le=1)
    reason: str = Field(max_length=4000)


Judging = Callable[[AssertJudge, Outcome], Verdict]


def _clip(text: str) -> str:
    return text if len(text) <= REASON_LIMIT else text[: REASON_LIMIT - 1] + "…"


def _answer(outcome: Outcome) -> str:
    return outcome.answer or ""


def _contains(assertion: AssertContains | AssertNotContains, outcome: Outcome) -> bool:
    answer, value = _answer(outcome), assertion.value
    if not assertion.case_sensitive:
        answer, value = answer.casefold(), value.casefold()
    return value in answer


def _same(actual: Call, expected: ExpectedToolCall) -> bool:
    return actual.name == expected.name and (
        expected.arguments is None or actual.arguments == expected.arguments
    )


def exact(actual: list[Call], expected: list[ExpectedToolCall]) -> bool:
    """The same calls in the same order, none missing and none extra."""
    return len(actual) == len(expected) and all(_same(a, e) for a, e in zip(actual, expected, strict=True))


def in_order(actual: list[Call], expected: list[ExpectedToolCall]) -> bool:
    """Every expected call, in order; other calls may come between."""
    waiting = iter(expected)
    current = next(waiting, None)
    for call in actual:
        if current is not None and _same(call, current):
            current = next(waiting, None)
    return current is None


def any_order(actual: list[Call], expected: list[ExpectedToolCall]) -> bool:
    """Every expected call somewhere, each matched by a call of its own; other calls allowed."""
    left = list(actual)
    for wanted in expected:
        hit = next((i for i, call in enumerate(left) if _same(call, wanted)), None)
        if hit is None:
            return False
        left.pop(hit)
    return True


_TRAJECTORY = {"EXACT": exact, "IN_ORDER": in_order, "ANY_ORDER": any_order}


def _names(calls: list[Call] | list[ExpectedToolCall]) -> str:
    return "[" + ", ".join(c.name for c in calls) + "]"


def _trajectory(assertion: AssertToolTrajectory, outcome: Outcome) -> AssertionResult:
    expected = outcome.expected_calls
    if expected is None:
        return AssertionResult(
            type=assertion.type,
            passed=False,
            reason="the case has no expected calls (expected.tool_calls) and no recorded run",
        )
    passed = _TRAJECTORY[assertion.match](outcome.calls, expected)
    verb = "matches" if passed else "does not match"
    reason = f"{assertion.match}: the calls {_names(outcome.calls)} {verb} the expected {_names(expected)}"
    return AssertionResult(type=assertion.type, passed=passed, reason=_clip(reason))


def _json_schema(assertion: AssertJsonSchema, outcome: Outcome) -> AssertionResult:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    try:
        value = json.loads(_answer(outcome))
    except ValueError:
        return AssertionResult(type=assertion.type, passed=False, reason="the answer is not JSON")
    error = best_match(Draft202012Validator(assertion.value).iter_errors(value))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "the answer"
        return AssertionResult(type=assertion.type, passed=False, reason=_clip(f"{where}: {error.message}"))
    return AssertionResult(type=assertion.type, passed=True, reason="the answer is JSON that fits the schema")


def _bound(kind: str, actual: float | None, limit: float, unit: str) -> AssertionResult:
    if actual is None:
        return AssertionResult(
            type=kind, passed=False, reason=f"the run's {unit} is unknown (no price for its model)"
        )
    passed = actual <= limit
    return AssertionResult(
        type=kind, passed=passed, reason=f"{unit} {actual:g} {'≤' if passed else '>'} {limit:g}"
    )


def evaluate(assertion: Assertion, outcome: Outcome, judging: Judging) -> AssertionResult:
    """One assertion's result; a run that did not succeed fails the answer's assertions, saying so."""
    kind = assertion.type
    if (
        isinstance(assertion, (AssertContains, AssertNotContains, AssertRegex, AssertJsonSchema, AssertJudge))
        and outcome.status != "succeeded"
    ):
        return AssertionResult(type=kind, passed=False, reason=f"the run {outcome.status}; it gave no answer")
    if isinstance(assertion, AssertContains):
        passed = _contains(assertion, outcome)
        said = "contains" if passed else "does not contain"
        return AssertionResult(
            type=kind, passed=passed, reason=_clip(f"the answer {said} {assertion.value!r}")
        )
    if isinstance(assertion, AssertNotContains):
        passed = not _contains(assertion, outcome)
        said = "does not contain" if passed else "contains"
        return AssertionResult(
            type=kind, passed=passed, reason=_clip(f"the answer {said} {assertion.value!r}")
        )
    if isinstance(assertion, AssertRegex):
        from stepwise.hooks.patterns import search

        passed = search(assertion.value, _answer(outcome))
        said = "matches" if passed else "does not match"
        return AssertionResult(
            type=kind, passed=passed, reason=_clip(f"the answer {said} /{assertion.value}/")
        )
    if isinstance(assertion, AssertJsonSchema):
        return _json_schema(assertion, outcome)
    if isinstance(assertion, AssertToolTrajectory):
        return _trajectory(assertion, outcome)
    if isinstance(assertion, AssertMaxSteps):
        return _bound(kind, outcome.steps, assertion.value, "steps")
    if isinstance(assertion, AssertMaxCost):
        return _bound(kind, outcome.cost_usd, assertion.value, "cost_usd")
    if isinstance(assertion, AssertMaxInputTokens):
        return _bound(kind, outcome.input_tokens, assertion.value, "input_tokens")
    if isinstance(assertion, AssertNoDivergence):
        passed = outcome.divergences == 0
        return AssertionResult(
            type=kind,
            passed=passed,
            reason="no call diverged from the record"
            if passed
            else f"{outcome.divergences} call(s) had no recorded result",
        )
    verdict = judging(assertion, outcome)
    return AssertionResult(
        type=kind, passed=verdict.passed, reason=_clip(verdict.reason), score=verdict.score
    )

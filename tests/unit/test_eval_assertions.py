"""Each assertion kind of an eval suite against a run's outcome (pure: no stack), and the judge's reply
held to its schema."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from stepwise.evals import assertions, judge
from stepwise.evals.assertions import Call, Outcome, Verdict, evaluate
from stepwise.evals.suites import Assertion, AssertJudge, ExpectedToolCall

ASSERTION: TypeAdapter[Any] = TypeAdapter(Assertion)
A, B, C = Call("a", {"x": 1}), Call("b", {}), Call("c", {"y": [1]})


def expected(*calls: Call) -> list[ExpectedToolCall]:
    return [ExpectedToolCall(name=c.name, arguments=c.arguments) for c in calls]


def outcome(**fields: Any) -> Outcome:
    base: dict[str, Any] = {
        "run_id": "run_1",
        "status": "succeeded",
        "answer": "The capital is Paris.",
        "steps": 2,
        "input_tokens": 300,
        "output_tokens": 20,
        "cost_usd": 0.002,
    }
    return Outcome(**{**base, **fields})


def no_judge(assertion: AssertJudge, facts: Outcome) -> Verdict:
    raise AssertionError("no judge expected")


def check(spec: dict[str, Any], facts: Outcome) -> bool:
    return evaluate(ASSERTION.validate_python(spec), facts, no_judge).passed


@pytest.mark.parametrize(
    ("actual", "wanted", "exact", "in_order", "any_order"),
    [
        ([A, B], [A, B], True, True, True),
        ([A, C, B], [A, B], False, True, True),  # another call between
        ([B, A], [A, B], False, False, True),  # the order differs
        ([A], [A, B], False, False, False),  # one missing
        ([A, A], [A, A], True, True, True),
        ([A], [A, A], False, False, False),  # each expected call needs a call of its own
        ([Call("a", {"x": 2})], [A], False, False, False),  # arguments differ
        ([], [], True, True, True),
        ([A], [], False, True, True),  # ADK: nothing expected, EXACT still wants nothing done
    ],
)
def test_trajectory_matches_as_adk_defines_them(
    actual: list[Call], wanted: list[Call], exact: bool, in_order: bool, any_order: bool
) -> None:
    calls = expected(*wanted)
    assert assertions.exact(actual, calls) is exact
    assert assertions.in_order(actual, calls) is in_order
    assert assertions.any_order(actual, calls) is any_order


def test_an_expected_call_without_arguments_matches_any_arguments() -> None:
    assert assertions.exact([Call("a", {"q": "anything"})], [ExpectedToolCall(name="a")])


def test_the_answer_assertions() -> None:
    facts = outcome()
    assert check({"type": "contains", "value": "Paris"}, facts)
    assert not check({"type": "contains", "value": "paris"}, facts)
    assert check({"type": "contains", "value": "paris", "case_sensitive": False}, facts)
    assert check({"type": "not_contains", "value": "London"}, facts)
    assert not check({"type": "not_contains", "value": "PARIS", "case_sensitive": False}, facts)
    assert check({"type": "regex", "value": r"capital is \w+\."}, facts)
    assert not check({"type": "regex", "value": r"^\d+$"}, facts)


def test_json_schema_wants_json_that_fits() -> None:
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    spec = {"type": "json_schema", "value": schema}
    assert check(spec, outcome(answer='{"n": 3}'))
    result = evaluate(ASSERTION.validate_python(spec), outcome(answer='{"n": "3"}'), no_judge)
    assert not result.passed and "n:" in result.reason
    assert evaluate(ASSERTION.validate_python(spec), outcome(answer="n is 3"), no_judge).reason == (
        "the answer is not JSON"
    )


def test_bounds_and_divergence() -> None:
    facts = outcome(divergences=2)
    assert check({"type": "max_steps", "value": 2}, facts)
    assert not check({"type": "max_steps", "value": 1}, facts)
    assert check({"type": "max_cost_usd", "value": 0.002}, facts)
    assert not check({"type": "max_cost_usd", "value": 0.001}, facts)
    assert not check({"type": "max_cost_usd", "value": 1}, outcome(cost_usd=None))  # unknown is not cheap
    assert not check({"type": "max_input_tokens", "value": 299}, facts)
    assert not check({"type": "no_divergence"}, facts)
    assert check({"type": "no_divergence"}, outcome())


def test_a_run_that_did_not_succeed_fails_the_answer_assertions_saying_why() -> None:
    result = evaluate(
        ASSERTION.validate_python({"type": "contains", "value": "x"}), outcome(status="failed"), no_judge
    )
    assert not result.passed and result.reason == "the run failed; it gave no answer"


def test_a_trajectory_without_expected_calls_fails_saying_so() -> None:
    result = evaluate(ASSERTION.validate_python({"type": "tool_trajectory"}), outcome(), no_judge)
    assert not result.passed and "no expected calls" in result.reason


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "regex", "value": "(a"},
        {"type": "regex", "value": r"(a)\1"},  # RE2: no backreferences
        {"type": "json_schema", "value": {"type": "nope"}},
        {"type": "tool_trajectory", "match": "exact"},
        {"type": "max_steps", "value": 0},
        {"type": "judge"},
        {"type": "contains"},
        {"type": "no_divergence", "value": 1},
    ],
)
def test_bad_assertions_are_refused(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ASSERTION.validate_python(spec)


def test_the_judge_reply_is_held_to_its_schema() -> None:
    assert judge.parse('{"pass": true, "score": 0.8, "reason": "ok"}') == Verdict(
        passed=True, score=0.8, reason="ok"
    )
    assert judge.parse('```json\n{"pass": false, "score": 0, "reason": "no"}\n```').passed is False
    for bad in (
        "yes",
        '{"pass": true}',
        '{"pass": true, "score": 2, "reason": "x"}',
        '{"pass": 1, "x": 1}',
        None,
    ):
        verdict = judge.parse(bad)
        assert not verdict.passed and "did not fit the schema" in verdict.reason


def test_aggregates_and_flips() -> None:
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from stepwise.evals import runner
    from stepwise.evals.runner import EvalCaseResult
    from stepwise.evals.suites import EvalSuite, FreshEvalCase, RecordedEvalCase

    assert runner._p95([]) is None
    assert runner._p95([float(v) for v in range(1, 21)]) == 19.0  # nearest rank
    stat = runner._stat([2.0, 4.0], [1.0, 1.0])
    assert (stat.mean, stat.baseline_mean, stat.delta) == (3.0, 1.0, 2.0)
    assert runner._stat([1.0], []).delta is None

    cases = [
        FreshEvalCase(message="a"),
        RecordedEvalCase(run_id="run_" + "0" * 26),
        FreshEvalCase(message="c"),
    ]
    suite = EvalSuite(
        eval_id="eval_1", name="s", agent_id="agt_1", cases=cases, assertions=[], created_at=datetime.now(UTC)
    )
    now = [
        EvalCaseResult(index=i, run_id=f"r{i}", status="succeeded", passed=False, assertions=[])
        for i in range(3)
    ]
    before = [{"index": 0, "passed": True}, {"index": 1, "passed": False}, {"index": 2, "passed": True}]
    changed = suite.model_copy(update={"cases": [*cases[:2], FreshEvalCase(message="another")]})
    previous = SimpleNamespace(data={"suite": changed.model_dump(mode="json"), "results": before})
    # Case 0 passed and fails now; 1 failed before too; 2 is another case at the same index now.
    assert runner._flipped(suite, now, previous) == [0]
    assert runner._flipped(suite, now, None) == []

"""The `judge` assertion: a model scores a case's answer against a rubric and answers
`{pass, score, reason}`. The answer is held to that JSON schema: the prompt gives the schema and the
reply is validated against it, and a reply that does not fit fails the assertion saying so (never a
pass by default). What the judge spends is counted on the eval run apart from the cases' runs.

litellm is imported only here, lazily (through stepwise.llm.client), when a suite has a judge."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pydantic import ValidationError

from stepwise.evals.assertions import Outcome, Verdict
from stepwise.evals.suites import AssertJudge
from stepwise.llm.models import Usage

SCHEMA = {
    "type": "object",
    "properties": {
        "pass": {"type": "boolean"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string"},
    },
    "required": ["pass", "score", "reason"],
    "additionalProperties": False,
}
ANSWER_LIMIT = 20_000  # characters of the answer the judge reads

PROMPT = (
    "You are an evaluator. Score the assistant's answer to the user's message against the rubric. "
    "Reply with one JSON object and nothing else, fitting this JSON Schema:\n"
    + json.dumps(SCHEMA)
    + "\n`pass` is your verdict, `score` how well the answer meets the rubric from 0 to 1, and `reason` "
    "one or two sentences saying why."
)


@dataclass
class Judging:
    """The judge for one eval run: the agent's model unless an assertion names one; `usage` adds up."""

    default_model: str | None
    usage: Usage = field(default_factory=Usage)
    calls: int = 0

    def __call__(self, assertion: AssertJudge, outcome: Outcome) -> Verdict:
        from stepwise.agents import bounds
        from stepwise.core.errors import ApiError, StepError
        from stepwise.llm import client

        try:
            model = bounds.check_effective(assertion.model or self.default_model)
        except ApiError as exc:
            return Verdict(passed=False, score=0, reason=f"the judge's model is not allowed: {exc.message}")
        messages = [
            {"role": "system", "content": PROMPT},
            {
                "role": "user",
                "content": f"Rubric:\n{assertion.rubric}\n\nUser's message:\n{outcome.message[:ANSWER_LIMIT]}"
                f"\n\nAssistant's answer:\n{(outcome.answer or '')[:ANSWER_LIMIT]}",
            },
        ]
        try:
            turn = client.complete(
                model=model, messages=messages, tools=None, temperature=0, script=assertion.script
            )
        except StepError as exc:
            return Verdict(passed=False, score=0, reason=f"the judge could not be asked: {exc}")
        self.calls += 1
        self.usage += turn.usage
        return parse(turn.text)


def parse(text: str | None) -> Verdict:
    """The judge's reply as a Verdict, or a failing one that says the reply did not fit the schema."""
    raw = (text or "").strip()
    if raw.startswith("```"):  # a fenced block is still one object
        raw = raw.strip("`").removeprefix("json").strip()
    try:
        return Verdict.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        return Verdict(
            passed=False, score=0, reason="the judge's reply did not fit the schema {pass, score, reason}"
        )

"""Eval suites: `{name, agent_id, cases, assertions}`, what `POST /v1/evals` takes, and the service
behind the suite routes (create, list, get, add recorded runs as cases by a filter).

A case is a recorded run (`{run_id}`, replayed what-if) or a fresh message (`{message, session_id?,
attachments?, expected?, script?}`, run as a new run with its tools served live or by its `script`).
The suite's assertions apply to every case; a case may add its own (`assertions`), so one suite can
hold cases that are held to different things."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from stepwise.attachments.models import MAX_ATTACHMENTS, AttachmentIn
from stepwise.core import ids
from stepwise.core.errors import NotFound, Unprocessable
from stepwise.core.ids import new_id
from stepwise.core.schema import Strict, Timestamp, utcnow
from stepwise.evals import store
from stepwise.llm.models import ScriptTurn
from stepwise.runs.models import MESSAGE_LIMIT, Run, RunStatus
from stepwise.runs.ports import stores
from stepwise.webhooks.models import WebhookConfig

MAX_CASES = 200  # cases of one suite: its item and its eval runs' results stay one DynamoDB item each
MAX_ASSERTIONS = 20  # of a suite, and again of one case
FROM_RUNS_SCAN = 1000  # runs a `cases:from-runs` filter reads at most before it stops looking
DISTRIBUTED_ABOVE = 40  # in AWS, a suite of more cases runs its Map as a Distributed Map


# --- Assertions ------------------------------------------------------------------------------------


class AssertContains(Strict):
    type: Literal["contains"]
    value: str = Field(min_length=1, max_length=10_000)
    case_sensitive: bool = True


class AssertNotContains(Strict):
    type: Literal["not_contains"]
    value: str = Field(min_length=1, max_length=10_000)
    case_sensitive: bool = True


class AssertRegex(Strict):
    """RE2 (google-re2): a tenant's pattern matches in linear time, so none can stall the scoring."""

    type: Literal["regex"]
    value: str = Field(min_length=1)

    @field_validator("value")
    @classmethod
    def _re2(cls, value: str) -> str:
        from stepwise.hooks.patterns import compile_pattern

        compile_pattern(value)  # ValueError says why RE2 refuses it: a 422
        return value


class AssertJsonSchema(Strict):
    type: Literal["json_schema"]
    value: dict[str, Any]

    @field_validator("value")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(value)
        except SchemaError as exc:
            raise ValueError(f"value is not a valid JSON Schema: {exc.message}") from None
        return value


class AssertToolTrajectory(Strict):
    """The run's tool calls against the case's expected calls (a fresh case's `expected.tool_calls`) or
    its recorded run's, as Google ADK's TrajectoryEvaluator compares them: EXACT (the same calls in the
    same order, nothing more), IN_ORDER (the expected calls in order, others between allowed),
    ANY_ORDER (each expected call somewhere, others allowed). Calls are equal when name and arguments
    are; an expected call without `arguments` matches any arguments."""

    type: Literal["tool_trajectory"]
    match: Literal["EXACT", "IN_ORDER", "ANY_ORDER"] = "EXACT"


class AssertMaxSteps(Strict):
    type: Literal["max_steps"]
    value: int = Field(ge=1)


class AssertMaxCost(Strict):
    type: Literal["max_cost_usd"]
    value: float = Field(ge=0)


class AssertMaxInputTokens(Strict):
    type: Literal["max_input_tokens"]
    value: int = Field(ge=0)


class AssertNoDivergence(Strict):
    type: Literal["no_divergence"]


class AssertJudge(Strict):
    """A model scores the answer against `rubric` and must answer `{pass, score, reason}`. `model`:
    any litellm model the deployment allows (else the agent's); `script` reaches only the scripted model,
    as a run's does (local suites and tests)."""

    type: Literal["judge"]
    rubric: str = Field(min_length=1, max_length=10_000)
    model: str | None = Field(default=None, min_length=1, max_length=256)
    script: list[ScriptTurn] | None = None


Assertion = Annotated[
    AssertContains
    | AssertNotContains
    | AssertRegex
    | AssertJsonSchema
    | AssertToolTrajectory
    | AssertMaxSteps
    | AssertMaxCost
    | AssertMaxInputTokens
    | AssertNoDivergence
    | AssertJudge,
    Field(discriminator="type"),
]
ASSERTION_TYPES = (
    "contains",
    "not_contains",
    "regex",
    "json_schema",
    "tool_trajectory",
    "max_steps",
    "max_cost_usd",
    "max_input_tokens",
    "no_divergence",
    "judge",
)


# --- Cases -----------------------------------------------------------------------------------------


class ExpectedToolCall(Strict):
    name: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] | None = None


class EvalExpected(Strict):
    tool_calls: list[ExpectedToolCall] | None = Field(default=None, max_length=100)


class RecordedEvalCase(Strict):
    """A recorded run of the suite's tenant, replayed what-if with the eval run's overrides."""

    run_id: str = Field(pattern=ids.RUN_ID)
    name: str | None = Field(default=None, max_length=200)
    expected: EvalExpected | None = None
    assertions: list[Assertion] = Field(default_factory=list, max_length=MAX_ASSERTIONS)


class FreshEvalCase(Strict):
    """A new run on `message`; its tools run live, or its `script` drives the scripted model."""

    message: str = Field(min_length=1, max_length=MESSAGE_LIMIT)
    name: str | None = Field(default=None, max_length=200)
    session_id: str | None = Field(default=None, pattern=ids.SESSION_ID)
    attachments: list[AttachmentIn] = Field(default_factory=list, max_length=MAX_ATTACHMENTS)
    expected: EvalExpected | None = None
    script: list[ScriptTurn] | None = None
    assertions: list[Assertion] = Field(default_factory=list, max_length=MAX_ASSERTIONS)


Case = RecordedEvalCase | FreshEvalCase


class EvalSuiteCreate(Strict):
    name: str = Field(min_length=1, max_length=200)
    agent_id: str = Field(pattern=ids.AGENT_ID)
    cases: list[Case] = Field(default_factory=list, max_length=MAX_CASES)
    assertions: list[Assertion] = Field(default_factory=list, max_length=MAX_ASSERTIONS)
    # Where `eval_run.completed` is POSTed (signed like a run's webhooks); else the agent's webhook.
    webhook: WebhookConfig | None = None


class EvalSuite(BaseModel):
    eval_id: str
    name: str
    agent_id: str
    cases: list[Case]
    assertions: list[Assertion]
    webhook: WebhookConfig | None = None
    created_at: Timestamp


class EvalSuiteSummary(BaseModel):
    eval_id: str
    name: str
    agent_id: str
    cases: int
    created_at: Timestamp


class EvalSuiteList(BaseModel):
    evals: list[EvalSuiteSummary]


class SuiteCreated(BaseModel):
    eval_id: str


class EvalCasesFromRuns(Strict):
    """Which recorded runs become cases: this tenant's ended runs, newest first, of `agent_id` (else
    the suite's agent), with `status` (else any ended one), created in [`created_after`,
    `created_before`), carrying `metadata_key`; at most `last` of them."""

    agent_id: str | None = Field(default=None, pattern=ids.AGENT_ID)
    status: Literal["succeeded", "failed", "cancelled"] | None = None
    last: int = Field(default=20, ge=1, le=MAX_CASES)
    created_after: Timestamp | None = None
    created_before: Timestamp | None = None
    metadata_key: str | None = Field(default=None, min_length=1, max_length=128)
    run_ids: list[str] | None = Field(default=None, max_length=MAX_CASES)

    @model_validator(mode="after")
    def _window(self) -> EvalCasesFromRuns:
        if self.created_after and self.created_before and self.created_after >= self.created_before:
            raise ValueError("created_after must be before created_before")
        for run_id in self.run_ids or []:
            if not re.match(ids.RUN_ID, run_id):
                raise ValueError(f"run_ids: {run_id!r} is not a run id")
        return self


class EvalCasesAdded(BaseModel):
    eval_id: str
    added: list[str]
    cases: int


# --- Service ---------------------------------------------------------------------------------------


def _check_recorded(tenant_id: str, run_id: str) -> Run:
    """A recorded case must be this tenant's ended run: another tenant's is exactly an unknown one."""
    run = stores().runs.get(tenant_id, run_id)  # NotFound run_not_found, whoever's it is
    if not run.done:
        raise Unprocessable(
            f"run {run_id} has not ended; only a recorded run can be a case",
            code="run_not_ended",
            details={"run_id": run_id, "status": run.status},
        )
    return run


def _not_found(eval_id: str) -> NotFound:
    return NotFound(f"eval suite {eval_id} not found", code="eval_not_found")


def create(tenant_id: str, body: EvalSuiteCreate) -> EvalSuite:
    stores().agents.get(tenant_id, body.agent_id)  # 404 agent_not_found
    for case in body.cases:
        if isinstance(case, RecordedEvalCase):
            _check_recorded(tenant_id, case.run_id)
    if body.webhook is not None:
        from stepwise.webhooks import keys as webhook_keys

        webhook_keys.require(tenant_id)
    suite = EvalSuite(
        eval_id=new_id("eval"),
        name=body.name,
        agent_id=body.agent_id,
        cases=body.cases,
        assertions=body.assertions,
        webhook=body.webhook,
        created_at=utcnow(),
    )
    store.put_suite(tenant_id, suite.eval_id, suite.model_dump(mode="json"), suite.created_at)
    return suite


def get(tenant_id: str, eval_id: str) -> EvalSuite:
    data = store.get_suite(tenant_id, eval_id)
    if data is None:
        raise _not_found(eval_id)
    return EvalSuite.model_validate(data)


def list_suites(tenant_id: str) -> EvalSuiteList:
    suites = [EvalSuite.model_validate(data) for data in store.list_suites(tenant_id)]
    return EvalSuiteList(
        evals=[
            EvalSuiteSummary(
                eval_id=s.eval_id,
                name=s.name,
                agent_id=s.agent_id,
                cases=len(s.cases),
                created_at=s.created_at,
            )
            for s in sorted(suites, key=lambda s: s.created_at, reverse=True)
        ]
    )


def _matches(run: Run, body: EvalCasesFromRuns, status: RunStatus | None) -> bool:
    if not run.done or (status and run.status != status):
        return False
    if run.parent_run_id is not None or run.callback_token is not None:
        return False  # a delegated child, or an eval case's own run: neither is a recorded conversation
    if body.created_after and run.created_at < body.created_after:
        return False
    if body.created_before and run.created_at >= body.created_before:
        return False
    return not body.metadata_key or body.metadata_key in run.metadata


def _found(tenant_id: str, agent_id: str, body: EvalCasesFromRuns) -> list[str]:
    found: list[str] = []
    token: str | None = None
    read = 0
    while len(found) < body.last and read < FROM_RUNS_SCAN:
        page, token = stores().runs.list_runs(
            tenant_id, agent_id=agent_id, status=body.status, limit=100, next_token=token
        )
        read += len(page)
        found += [run.run_id for run in page if _matches(run, body, body.status)]
        if token is None:
            break
    return found[: body.last]


def add_from_runs(tenant_id: str, eval_id: str, body: EvalCasesFromRuns) -> EvalCasesAdded:
    """Add this tenant's recorded runs that match `body` as `{run_id}` cases (a run already a case of
    the suite is not added twice). Named `run_ids` are checked one by one: another tenant's is a 404."""
    suite = get(tenant_id, eval_id)
    if body.run_ids:
        picked = [_check_recorded(tenant_id, run_id).run_id for run_id in body.run_ids]
    else:
        picked = _found(tenant_id, body.agent_id or suite.agent_id, body)
    have = {case.run_id for case in suite.cases if isinstance(case, RecordedEvalCase)}
    added = [run_id for run_id in dict.fromkeys(picked) if run_id not in have]
    if len(suite.cases) + len(added) > MAX_CASES:
        raise Unprocessable(
            f"a suite holds at most {MAX_CASES} cases", code="too_many_cases", details={"limit": MAX_CASES}
        )
    cases: list[Case] = [*suite.cases, *(RecordedEvalCase(run_id=run_id) for run_id in added)]
    suite = suite.model_copy(update={"cases": cases})
    store.put_suite(tenant_id, eval_id, suite.model_dump(mode="json"), suite.created_at)
    return EvalCasesAdded(eval_id=eval_id, added=added, cases=len(cases))

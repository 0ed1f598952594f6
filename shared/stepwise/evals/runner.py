"""Running a suite: one execution of the EvalRun state machine (statemachine/eval_run.asl.json) per
eval run, named after it.

The machine maps over the case indexes with MaxConcurrency from the request (default 4, capped by the
tenant's active-run quota). Each case is a Task that waits on a task token, as a delegating parent
waits on its child: `start_case` starts the case's run carrying the token (`callback_token`), and the
run's ending (stepwise.runs.ending) sends it back with `{run_id, status}`. No Lambda runs while a case
works. `case_done` counts the case (the eval run's progress, an `eval_case_completed` event); then one
`score` Task holds every case to its assertions, compares each with its baseline, aggregates, finds
the flips and writes the result, which emits `eval_run_completed` and the `eval_run.completed`
webhook. `failed` records an execution that failed past its Catch.

Case run ids are derived from the eval run and the case's index, so a retried start finds its run."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from stepwise.core import aws, config, ids
from stepwise.core.errors import ApiError, NotFound, Unavailable, Unprocessable
from stepwise.core.ids import derived_id, new_id
from stepwise.core.observability import logger
from stepwise.core.schema import Strict, Timestamp, json_default, rfc3339, utcnow
from stepwise.evals import store
from stepwise.evals.assertions import AssertionResult, Call, Outcome, evaluate
from stepwise.evals.suites import DISTRIBUTED_ABOVE, Case, EvalSuite, RecordedEvalCase
from stepwise.evals.suites import get as get_suite
from stepwise.runs import events
from stepwise.runs.eventlog import EventPage, read
from stepwise.runs.models import Run, RunCreate, RunExists
from stepwise.runs.ports import stores

DEFAULT_CONCURRENCY = 4
MAX_CONCURRENCY = 40
COMPLETED = "eval_run.completed"  # the webhook event
# EvalOverrides a fresh case can take: the rest (model, prompt, tools, temperature) change how a recorded
# run is replayed, which is what-if's (stepwise.evals.whatif).
# What an override changes of the agent itself: a fresh case's run takes these as a what-if run does
# (stepwise.loop.step applies `Run.what_if`), without a record to serve from.
AGENT_CHANGES = frozenset({"model", "system_prompt", "tools", "temperature"})
EVENTS_PAGE = 200


class EvalOverrides(Strict):
    """What changes for every case of the eval run; a recorded case is replayed what-if with these."""

    model: str | None = Field(default=None, min_length=1, max_length=256)
    system_prompt: str | None = Field(default=None, max_length=100_000)
    tools: list[dict[str, Any]] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_steps: int | None = Field(default=None, ge=1, le=200)
    agent_id: str | None = Field(default=None, pattern=ids.AGENT_ID)
    match: Literal["arguments", "name"] | None = None
    live_reads: bool | None = None


class EvalRunCreate(Strict):
    overrides: EvalOverrides | None = None
    concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)


class EvalRunAccepted(BaseModel):
    eval_run_id: str
    eval_id: str
    status: str
    cases: int
    concurrency: int


class EvalAssertionResult(BaseModel):
    type: str
    passed: bool
    reason: str
    score: float | None = None


class EvalCaseResult(BaseModel):
    index: int
    name: str | None = None
    run_id: str | None
    baseline_run_id: str | None = None
    status: str
    passed: bool
    assertions: list[EvalAssertionResult]
    error: dict[str, Any] | None = None
    cost_usd: float | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    steps: int = 0
    compare: dict[str, Any] | None = None


class EvalStat(BaseModel):
    mean: float | None = None
    p95: float | None = None
    baseline_mean: float | None = None
    delta: float | None = None


class EvalRunView(BaseModel):
    """`GET /v1/evals/{eval_id}/runs/{eval_run_id}`."""

    eval_run_id: str
    eval_id: str
    status: str
    total: int
    done: int
    concurrency: int
    overrides: dict[str, Any]
    created_at: Timestamp
    finished_at: Timestamp | None = None
    pass_rate: float | None = None
    passed: int | None = None
    cases: list[EvalCaseResult] = Field(default_factory=list)
    cost_usd: EvalStat | None = None
    input_tokens: EvalStat | None = None
    steps: EvalStat | None = None
    cost_delta_usd: float | None = None
    input_tokens_delta: float | None = None
    steps_delta: float | None = None
    flipped: list[int] = Field(default_factory=list)
    previous_eval_run_id: str | None = None
    judge_usage: dict[str, Any] | None = None
    judge_calls: int = 0
    error: dict[str, Any] | None = None


class EvalRunList(BaseModel):
    runs: list[EvalRunView]


def _not_found(eval_run_id: str) -> NotFound:
    return NotFound(f"eval run {eval_run_id} not found", code="eval_run_not_found")


def case_run_id(eval_run_id: str, created_at: datetime, index: int) -> str:
    return derived_id("run", created_at, eval_run_id, str(index))


def _check_overrides(tenant_id: str, suite: EvalSuite, overrides: EvalOverrides) -> None:
    """Checked like a what-if request (the tools like an agent edit's), for fresh cases too: a bad
    override is a 422 now, not a failed case later."""
    from stepwise.evals import whatif

    changes = overrides.model_dump(mode="json", include=set(AGENT_CHANGES), exclude_none=True)
    if changes:
        try:
            whatif.WhatIf.model_validate(changes)
        except ValidationError as exc:
            raise Unprocessable(
                "the overrides are not a valid change of the agent",
                code="validation_error",
                details=[{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()],
            ) from exc
    if overrides.agent_id is not None:
        stores().agents.get(tenant_id, overrides.agent_id)  # 404 agent_not_found
    if overrides.model is not None:
        from stepwise.agents import bounds

        bounds.check_named(overrides.model)


def start(tenant_id: str, eval_id: str, body: EvalRunCreate) -> EvalRunAccepted:
    """`POST /v1/evals/{eval_id}/runs`: record the eval run, then start its execution."""
    suite = get_suite(tenant_id, eval_id)
    if not suite.cases:
        raise Unprocessable("the suite has no cases to run", code="no_cases")
    overrides = body.overrides or EvalOverrides()
    _check_overrides(tenant_id, suite, overrides)
    # Each case is an active run while it works: more at once than the quota allows could only fail.
    concurrency = min(body.concurrency or DEFAULT_CONCURRENCY, config.quotas().max_active_runs)
    eval_run_id, created_at = new_id("evr"), utcnow()
    data = {
        "eval_run_id": eval_run_id,
        "suite": suite.model_dump(mode="json"),
        "overrides": overrides.model_dump(mode="json", exclude_none=True),
        "concurrency": concurrency,
    }
    store.put_run(tenant_id, eval_id, eval_run_id, data, created_at)
    total = len(suite.cases)
    events.emit(
        tenant_id,
        eval_run_id,
        "eval_run_started",
        {"eval_id": eval_id, "cases": total, "concurrency": concurrency},
    )
    execution = {
        "tenant_id": tenant_id,
        "eval_id": eval_id,
        "eval_run_id": eval_run_id,
        "concurrency": concurrency,
        "case_count": total,
        "distributed": total > DISTRIBUTED_ABOVE,
        "cases": list(range(total)),  # indexes only: the cases stay in the eval run's item
    }
    try:
        aws.client("stepfunctions").start_execution(
            stateMachineArn=config.eval_machine().state_machine_arn,
            name=eval_run_id,
            input=json.dumps(execution),
        )
    except Exception as exc:
        error = {"code": "start_failed", "message": "the eval run's execution could not be started"}
        store.finish(tenant_id, eval_id, eval_run_id, "failed", {**data, "error": error}, utcnow())
        raise Unavailable("the eval run could not be started; it is recorded as failed, try again") from exc
    return EvalRunAccepted(
        eval_run_id=eval_run_id, eval_id=eval_id, status="running", cases=total, concurrency=concurrency
    )


# --- The state machine's tasks ---------------------------------------------------------------------


def _start_case(
    tenant_id: str,
    suite: EvalSuite,
    case: Case,
    overrides: EvalOverrides,
    *,
    run_id: str,
    token: str,
    meta: dict[str, Any],
) -> Run:
    """The seam between suites and runs: a recorded case is replayed what-if (section 1's
    `start_what_if`, imported here alone), a fresh one starts a run on its message."""
    if isinstance(case, RecordedEvalCase):
        # Section 1's module (branch whatif); until it is merged this import fails and the case fails.
        from stepwise.evals import whatif  # type: ignore[attr-defined,unused-ignore]

        what_if = whatif.WhatIf(**overrides.model_dump(exclude_none=True))
        return whatif.start_what_if(tenant_id, case.run_id, what_if, run_id=run_id, callback_token=token)
    from stepwise.runs.start import start_run

    body = RunCreate(
        message=case.message,
        session_id=case.session_id,
        attachments=case.attachments,
        script=case.script,
        max_steps=overrides.max_steps,
        metadata=meta,
    )
    changes = overrides.model_dump(mode="json", include=set(AGENT_CHANGES), exclude_none=True)
    return start_run(
        tenant_id,
        overrides.agent_id or suite.agent_id,
        body,
        run_id=run_id,
        callback_token=token,
        what_if=changes or None,  # the agent as changed, for this run alone; no what_if_of: nothing served
    )


def _send(token: str, outcome: dict[str, Any]) -> None:
    aws.client("stepfunctions").send_task_success(taskToken=token, output=json.dumps(outcome))


def start_case(event: dict[str, Any]) -> None:
    """The Map's Task for one case (waitForTaskToken): start its run carrying the token. A case that
    cannot start (its recorded run is gone, the quota is full) is answered at once, failed."""
    tenant_id, eval_id, eval_run_id = event["tenant_id"], event["eval_id"], event["eval_run_id"]
    index, token = int(event["index"]), str(event["task_token"])
    item = store.get_run(tenant_id, eval_id, eval_run_id)
    if item is None:
        _send(
            token,
            {"index": index, "run_id": None, "status": "failed", "error": {"code": "eval_run_not_found"}},
        )
        return
    suite = EvalSuite.model_validate(item.data["suite"])
    overrides = EvalOverrides.model_validate(item.data.get("overrides") or {})
    run_id = case_run_id(eval_run_id, item.created_at, index)
    meta = {"eval_id": eval_id, "eval_run_id": eval_run_id, "eval_case": index}
    try:
        _start_case(tenant_id, suite, suite.cases[index], overrides, run_id=run_id, token=token, meta=meta)
    except RunExists:
        _rearm(tenant_id, run_id, token)  # a retried Task: the run exists, give it this attempt's token
    except ApiError as exc:
        logger.info("an eval case could not start", extra={"eval_run_id": eval_run_id, "code": exc.code})
        error = {"code": exc.code, "message": exc.message}
        _send(token, {"index": index, "run_id": None, "status": "failed", "error": error})
    except ImportError:  # a recorded case before what-if (stepwise.evals.whatif) is deployed
        error = {"code": "what_if_unavailable", "message": "recorded cases need what-if replay"}
        _send(token, {"index": index, "run_id": None, "status": "failed", "error": error})


def _rearm(tenant_id: str, run_id: str, token: str) -> None:
    runs = stores().runs
    run = runs.get(tenant_id, run_id)
    if not run.done and runs.transition(
        tenant_id, run_id, run.status, allowed_from={run.status}, callback_token=token
    ):
        return
    _send(token, {"run_id": run_id, "status": runs.get(tenant_id, run_id).status})


def case_done(event: dict[str, Any]) -> dict[str, Any]:
    """A case's run has ended: count it and say so; the outcome goes on to the score."""
    tenant_id, eval_id, eval_run_id = event["tenant_id"], event["eval_id"], event["eval_run_id"]
    outcome = dict(event.get("outcome") or {})
    if "Error" in outcome:  # the Task itself failed or timed out (its Catch): the case has no outcome
        error = {"code": str(outcome["Error"]), "message": str(outcome.get("Cause") or "")[:1000]}
        outcome = {"run_id": None, "status": "failed", "error": error}
    outcome["index"] = int(event["index"])
    done = store.case_done(tenant_id, eval_id, eval_run_id)
    events.emit(
        tenant_id,
        eval_run_id,
        "eval_case_completed",
        {
            "index": outcome["index"],
            "run_id": outcome.get("run_id"),
            "status": outcome.get("status"),
            "done": done,
        },
    )
    return outcome


def _calls(tenant_id: str, run_id: str) -> list[Call]:
    """The run's tool calls in order, from its event log."""
    calls: list[Call] = []
    seq = 0
    while True:
        page = stores().events.after(tenant_id, run_id, seq, EVENTS_PAGE)
        for event in page:
            if event.type == "tool_call":
                arguments = event.data.get("arguments")
                calls.append(
                    Call(str(event.data.get("tool_name")), arguments if isinstance(arguments, dict) else {})
                )
        if len(page) < EVENTS_PAGE:
            return calls
        seq = page[-1].seq


def _outcome(tenant_id: str, run: Run, expected: list[Any] | None, message: str) -> Outcome:
    return Outcome(
        run_id=run.run_id,
        status=run.status,
        answer=run.output,
        message=message,
        steps=run.steps,
        input_tokens=run.usage.input_tokens,
        output_tokens=run.usage.output_tokens,
        cost_usd=run.usage.cost_usd,
        calls=_calls(tenant_id, run.run_id),
        divergences=int(getattr(run, "divergences", 0) or 0),
        expected_calls=expected,
    )


def _case_key(case: Case) -> str:
    """What makes a case the same case in two eval runs (its index, and what it runs)."""
    if isinstance(case, RecordedEvalCase):
        return f"run:{case.run_id}"
    return "message:" + hashlib.sha256(case.message.encode()).hexdigest()[:16]


def _previous(tenant_id: str, eval_id: str, eval_run_id: str) -> Any:
    """The suite's latest eval run scored before this one, if any."""
    for item in store.list_runs(tenant_id, eval_id):
        if (
            item.data.get("eval_run_id") != eval_run_id
            and item.status == "succeeded"
            and item.sk < store.run_key(eval_id, eval_run_id)
        ):
            return item
    return None


def _compare(tenant_id: str, baseline: str, run_id: str) -> dict[str, Any] | None:
    """What-if's comparison of the case's run with its recorded run, in brief."""
    try:
        from stepwise.evals import compare  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # section 1 not merged yet: the result simply has no comparison
        return None
    try:
        summary = compare.compare(tenant_id, baseline, run_id).summary
    except ApiError:
        return None
    return summary if isinstance(summary, dict) else summary.model_dump(mode="json")


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _stat(current: list[float], baseline: list[float]) -> EvalStat:
    mean, base = _mean(current), _mean(baseline)
    return EvalStat(
        mean=mean,
        p95=_p95(current),
        baseline_mean=base,
        delta=None if mean is None or base is None else mean - base,
    )


def _score_case(
    tenant_id: str,
    suite: EvalSuite,
    index: int,
    outcome: dict[str, Any],
    judging: Any,
    baselines: dict[int, Run],
) -> EvalCaseResult:
    case = suite.cases[index]
    run_id = outcome.get("run_id")
    if not run_id:
        error = outcome.get("error") or {"code": "not_started"}
        failed = [
            EvalAssertionResult(
                type="run", passed=False, reason=f"the case's run did not start: {error.get('code')}"
            )
        ]
        return EvalCaseResult(
            index=index,
            name=case.name,
            run_id=None,
            status="failed",
            passed=False,
            assertions=failed,
            error=error,
        )
    run = stores().runs.get(tenant_id, run_id)
    baseline = baselines.get(index)
    expected = case.expected.tool_calls if case.expected and case.expected.tool_calls is not None else None
    if expected is None and isinstance(case, RecordedEvalCase) and baseline is not None:
        from stepwise.evals.suites import ExpectedToolCall

        expected = [
            ExpectedToolCall(name=c.name, arguments=c.arguments) for c in _calls(tenant_id, baseline.run_id)
        ]
    message = run.input
    facts = _outcome(tenant_id, run, expected, message)
    results: list[AssertionResult] = [
        evaluate(a, facts, judging) for a in [*suite.assertions, *case.assertions]
    ]
    views = [EvalAssertionResult(**r.model_dump()) for r in results]
    return EvalCaseResult(
        index=index,
        name=case.name,
        run_id=run_id,
        baseline_run_id=baseline.run_id if baseline else None,
        status=run.status,
        passed=run.status == "succeeded" and all(r.passed for r in results),
        assertions=views,
        error=run.error.model_dump() if run.error else None,
        cost_usd=run.usage.cost_usd,
        input_tokens=run.usage.input_tokens,
        output_tokens=run.usage.output_tokens,
        steps=run.steps,
        compare=_compare(tenant_id, baseline.run_id, run_id)
        if isinstance(case, RecordedEvalCase) and baseline
        else None,
    )


def _baselines(tenant_id: str, suite: EvalSuite, previous: Any) -> dict[int, Run]:
    """Each case's baseline: a recorded case's recorded run; a fresh case's run in the previous eval run."""
    out: dict[int, Run] = {}
    earlier = {c["index"]: c for c in (previous.data.get("results") or [])} if previous is not None else {}
    previous_suite = EvalSuite.model_validate(previous.data["suite"]) if previous is not None else None
    for index, case in enumerate(suite.cases):
        run_id: str | None = None
        if isinstance(case, RecordedEvalCase):
            run_id = case.run_id
        elif (
            previous_suite is not None
            and index < len(previous_suite.cases)
            and _case_key(previous_suite.cases[index]) == _case_key(case)
        ):
            run_id = (earlier.get(index) or {}).get("run_id")
        if run_id:
            with contextlib.suppress(NotFound):
                out[index] = stores().runs.get(tenant_id, run_id)
    return out


def _flipped(suite: EvalSuite, results: list[EvalCaseResult], previous: Any) -> list[int]:
    """Cases that passed in the previous eval run and fail now (the same case at the same index)."""
    if previous is None:
        return []
    before = EvalSuite.model_validate(previous.data["suite"])
    passed_before = {c["index"] for c in previous.data.get("results") or [] if c.get("passed")}
    return [
        r.index
        for r in results
        if not r.passed
        and r.index in passed_before
        and r.index < len(before.cases)
        and _case_key(before.cases[r.index]) == _case_key(suite.cases[r.index])
    ]


def score(event: dict[str, Any]) -> dict[str, Any]:
    """Hold every case to its assertions, aggregate, find the flips and write the result, once."""
    from stepwise.evals.judge import Judging

    tenant_id, eval_id, eval_run_id = event["tenant_id"], event["eval_id"], event["eval_run_id"]
    item = store.get_run(tenant_id, eval_id, eval_run_id)
    if item is None or item.status != "running":
        return {"status": item.status if item else "gone"}
    suite = EvalSuite.model_validate(item.data["suite"])
    overrides = EvalOverrides.model_validate(item.data.get("overrides") or {})
    outcomes = {int(o["index"]): o for o in event.get("outcomes") or []}
    previous = _previous(tenant_id, eval_id, eval_run_id)
    baselines = _baselines(tenant_id, suite, previous)
    agent_model: str | None = None
    with contextlib.suppress(NotFound):
        agent_model = stores().agents.get(tenant_id, overrides.agent_id or suite.agent_id).model
    judging = Judging(default_model=overrides.model or agent_model)
    results = [
        _score_case(tenant_id, suite, index, outcomes.get(index) or {"index": index}, judging, baselines)
        for index in range(len(suite.cases))
    ]
    ran = [r for r in results if r.run_id]
    cost = [r.cost_usd for r in ran if r.cost_usd is not None]
    base_runs = [baselines[r.index] for r in ran if r.index in baselines]
    base_cost = [b.usage.cost_usd for b in base_runs if b.usage.cost_usd is not None]
    passed = sum(1 for r in results if r.passed)
    cost_stat = _stat(cost, base_cost)
    tokens_stat = _stat(
        [float(r.input_tokens) for r in ran], [float(b.usage.input_tokens) for b in base_runs]
    )
    steps_stat = _stat([float(r.steps) for r in ran], [float(b.steps) for b in base_runs])
    flipped = _flipped(suite, results, previous)
    summary = {
        "pass_rate": passed / len(results),
        "passed": passed,
        "cost_usd": cost_stat.model_dump(),
        "input_tokens": tokens_stat.model_dump(),
        "steps": steps_stat.model_dump(),
        "cost_delta_usd": cost_stat.delta,
        "input_tokens_delta": tokens_stat.delta,
        "steps_delta": steps_stat.delta,
        "flipped": flipped,
        "previous_eval_run_id": previous.data.get("eval_run_id") if previous is not None else None,
        "judge_usage": judging.usage.model_dump(mode="json"),
        "judge_calls": judging.calls,
    }
    data = {
        **item.data,
        "eval_run_id": eval_run_id,
        "results": [r.model_dump(mode="json") for r in results],
        **summary,
    }
    if store.finish(tenant_id, eval_id, eval_run_id, "succeeded", data, utcnow()):
        _announce(tenant_id, suite, eval_run_id, "succeeded", summary, item.created_at)
    return {"status": "succeeded", "pass_rate": summary["pass_rate"]}


def failed(event: dict[str, Any]) -> dict[str, Any]:
    """The execution failed past its cases (a Score that kept failing): the eval run ends failed."""
    tenant_id, eval_id, eval_run_id = event["tenant_id"], event["eval_id"], event["eval_run_id"]
    item = store.get_run(tenant_id, eval_id, eval_run_id)
    if item is None:
        return {"status": "gone"}
    caught = event.get("error") or {}
    error = {"code": "eval_failed", "message": str(caught.get("Cause") or caught.get("Error") or "")[:1000]}
    if store.finish(tenant_id, eval_id, eval_run_id, "failed", {**item.data, "error": error}, utcnow()):
        suite = EvalSuite.model_validate(item.data["suite"])
        _announce(tenant_id, suite, eval_run_id, "failed", {"error": error}, item.created_at)
    return {"status": "failed"}


def _announce(
    tenant_id: str, suite: EvalSuite, eval_run_id: str, status: str, summary: dict[str, Any], at: datetime
) -> None:
    """The eval run's terminal event, and its webhook: the suite's, else its agent's."""
    data = {"eval_id": suite.eval_id, "eval_run_id": eval_run_id, "status": status, **summary}
    events.emit(tenant_id, eval_run_id, "eval_run_completed", data)
    webhook = suite.webhook
    if webhook is None:
        with contextlib.suppress(NotFound):
            webhook = stores().agents.get(tenant_id, suite.agent_id).webhook
    if webhook is None:
        return
    from stepwise.webhooks.enqueue import enqueue_raw

    text = json.dumps({"type": COMPLETED, "timestamp": rfc3339(utcnow()), "data": data}, default=json_default)
    enqueue_raw(tenant_id, eval_run_id, COMPLETED, webhook.url, text, key="completed", at=at)


# --- Reading ---------------------------------------------------------------------------------------


def _view(item: Any) -> EvalRunView:
    data = item.data
    suite = data.get("suite") or {}
    return EvalRunView(
        eval_run_id=item.sk.rsplit("#", 1)[-1],
        eval_id=item.eval_id,
        status=item.status or "running",
        total=len(suite.get("cases") or []),
        done=int(item.done or 0),
        concurrency=int(data.get("concurrency") or DEFAULT_CONCURRENCY),
        overrides=data.get("overrides") or {},
        created_at=item.created_at,
        finished_at=item.finished_at,
        pass_rate=data.get("pass_rate"),
        passed=data.get("passed"),
        cases=[EvalCaseResult.model_validate(c) for c in data.get("results") or []],
        cost_usd=data.get("cost_usd"),
        input_tokens=data.get("input_tokens"),
        steps=data.get("steps"),
        cost_delta_usd=data.get("cost_delta_usd"),
        input_tokens_delta=data.get("input_tokens_delta"),
        steps_delta=data.get("steps_delta"),
        flipped=data.get("flipped") or [],
        previous_eval_run_id=data.get("previous_eval_run_id"),
        judge_usage=data.get("judge_usage"),
        judge_calls=int(data.get("judge_calls") or 0),
        error=data.get("error"),
    )


def get(tenant_id: str, eval_id: str, eval_run_id: str) -> EvalRunView:
    get_suite(tenant_id, eval_id)  # 404 eval_not_found first
    item = store.get_run(tenant_id, eval_id, eval_run_id)
    if item is None:
        raise _not_found(eval_run_id)
    return _view(item)


def list_runs(tenant_id: str, eval_id: str) -> EvalRunList:
    """The suite's eval runs, newest first, without their cases (GET one for those)."""
    get_suite(tenant_id, eval_id)
    views = [_view(item).model_copy(update={"cases": []}) for item in store.list_runs(tenant_id, eval_id)]
    return EvalRunList(runs=views)


def read_events(tenant_id: str, eval_id: str, eval_run_id: str, after: int) -> EventPage:
    """The eval run's events after seq `after` (its own log, keyed by its id)."""
    get(tenant_id, eval_id, eval_run_id)  # 404 first: the log of another tenant's eval run is never read
    return read(tenant_id, eval_run_id, after, 0, known=True)

"""Eval suites on the local stack: every case of a suite as one EvalRun execution (the real ASL on
moto's interpreter), each case a run waited on by task token, scored against every assertion kind."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.receiver import Receiver
from tests.integration.support import OTHER_KEY, tool, wait_for_run

CALLS = [{"name": "lookup", "arguments": {"q": "a"}}, {"name": "search", "arguments": {"q": "b"}}]
SWAPPED = [CALLS[1], CALLS[0]]
VERDICT = {"pass": True, "score": 0.9, "reason": "it names the capital"}


def say(text: str) -> list[dict[str, Any]]:
    return [{"text": text}]


def calling(calls: list[dict[str, Any]], then: str) -> list[dict[str, Any]]:
    return [{"tool_calls": calls}, {"text": then}]


# Ten cases, every assertion kind; `passes` is what each case's data says it must come to.
TEN: list[tuple[dict[str, Any], bool]] = [
    (
        {
            "message": "capital?",
            "script": say("The capital is Paris."),
            "assertions": [{"type": "contains", "value": "paris", "case_sensitive": False}],
        },
        True,
    ),
    (
        {
            "message": "capital?",
            "script": say("I do not know."),
            "assertions": [{"type": "contains", "value": "Paris"}],
        },
        False,
    ),
    (
        {
            "message": "status?",
            "script": say("all good"),
            "assertions": [{"type": "not_contains", "value": "error"}],
        },
        True,
    ),
    (
        {
            "message": "order?",
            "script": say("Order #12345 shipped"),
            "assertions": [{"type": "regex", "value": r"#\d{5}\b"}],
        },
        True,
    ),
    (
        {
            "message": "weather?",
            "script": say('{"city": "Paris", "temp": 21}'),
            "assertions": [
                {
                    "type": "json_schema",
                    "value": {
                        "type": "object",
                        "required": ["city", "temp"],
                        "properties": {"city": {"type": "string"}, "temp": {"type": "number"}},
                    },
                }
            ],
        },
        True,
    ),
    (
        {
            "message": "weather?",
            "script": say("sunny, 21 degrees"),
            "assertions": [{"type": "json_schema", "value": {"type": "object"}}],
        },
        False,
    ),
    (
        {
            "message": "find",
            "script": calling(CALLS, "found it"),
            "expected": {"tool_calls": CALLS},
            "assertions": [
                {"type": "tool_trajectory", "match": "EXACT"},
                {"type": "tool_trajectory", "match": "IN_ORDER"},
            ],
        },
        True,
    ),
    (
        {
            "message": "find",
            "script": calling(SWAPPED, "found it"),
            "expected": {"tool_calls": CALLS},
            "assertions": [{"type": "tool_trajectory", "match": "ANY_ORDER"}],
        },
        True,
    ),
    (
        {
            "message": "find",
            "script": calling(SWAPPED, "found it"),
            "expected": {"tool_calls": CALLS},
            "assertions": [
                {"type": "tool_trajectory", "match": "EXACT"},
                {"type": "max_cost_usd", "value": 1.0},
                {"type": "max_input_tokens", "value": 1},
            ],
        },
        False,
    ),
    (
        {
            "message": "capital?",
            "script": say("Paris"),
            "assertions": [
                {
                    "type": "judge",
                    "rubric": "Names the capital of France.",
                    "script": say(json.dumps(VERDICT)),
                },
                {"type": "no_divergence"},
            ],
        },
        True,
    ),
]


@pytest.fixture(scope="module")
def peer() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def agent_id(stack: LocalStack, peer: Receiver) -> str:
    status, _, created = stack.invoke_api("POST", "/v1/agents", {"name": "evaluated"})
    assert status == 201, created
    for name in ("lookup", "search"):
        status, _, added = stack.invoke_api(
            "POST",
            f"/v1/agents/{created['agent_id']}/tools",
            tool(name, peer.url + f"/{name}", read_only=True),
        )
        assert status == 201, added
    return str(created["agent_id"])


def create_suite(stack: LocalStack, body: dict[str, Any], key: str | None = None) -> str:
    kwargs = {"key": key} if key else {}
    status, _, created = stack.invoke_api("POST", "/v1/evals", body, **kwargs)
    assert status == 201, created
    return str(created["eval_id"])


def run_suite(stack: LocalStack, eval_id: str, **body: Any) -> dict[str, Any]:
    status, _, accepted = stack.invoke_api("POST", f"/v1/evals/{eval_id}/runs", body)
    assert status == 202, accepted
    return wait_for_eval(stack, eval_id, accepted["eval_run_id"])


def wait_for_eval(stack: LocalStack, eval_id: str, eval_run_id: str) -> dict[str, Any]:
    def scored() -> dict[str, Any]:
        status, _, found = stack.invoke_api("GET", f"/v1/evals/{eval_id}/runs/{eval_run_id}")
        assert status == 200, found
        assert found["status"] != "running", f"{found['done']} of {found['total']} cases done"
        return dict(found)

    return eventually(scored, timeout=90, what=f"eval run {eval_run_id} to be scored")


@pytest.fixture(scope="module")
def ten(stack: LocalStack, agent_id: str) -> tuple[str, dict[str, Any]]:
    """The ten-case suite, run once at concurrency 4."""
    suite = {
        "name": "ten",
        "agent_id": agent_id,
        "cases": [case for case, _ in TEN],
        "assertions": [{"type": "max_steps", "value": 5}],
    }
    eval_id = create_suite(stack, suite)
    return eval_id, run_suite(stack, eval_id, concurrency=4)


def test_ten_cases_with_every_assertion_kind_pass_or_fail_as_their_data_says(
    stack: LocalStack, ten: tuple[str, dict[str, Any]]
) -> None:
    _, result = ten
    assert result["status"] == "succeeded", result
    assert result["total"] == result["done"] == 10
    assert [c["passed"] for c in result["cases"]] == [passes for _, passes in TEN], [
        (c["index"], c["assertions"]) for c in result["cases"]
    ]
    assert result["pass_rate"] == 0.7
    kinds = {a["type"] for c in result["cases"] for a in c["assertions"]}
    assert kinds == {
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
    }
    every = {(c["index"], a["type"], a["passed"]) for c in result["cases"] for a in c["assertions"]}
    assert (8, "tool_trajectory", False) in every and (8, "max_cost_usd", True) in every
    assert (8, "max_input_tokens", False) in every
    judged = next(a for a in result["cases"][9]["assertions"] if a["type"] == "judge")
    assert judged == {"type": "judge", "passed": True, "reason": VERDICT["reason"], "score": 0.9}
    assert result["judge_calls"] == 1 and result["judge_usage"]["input_tokens"] > 0  # apart from the cases'
    assert "does not match" in result["cases"][8]["assertions"][1]["reason"]  # after the suite's own
    assert result["flipped"] == [] and result["previous_eval_run_id"] is None
    for case in result["cases"]:
        run = wait_for_run(stack, case["run_id"])
        assert run["metadata"]["eval_case"] == case["index"]  # each case is a run of its own
    assert result["steps"]["mean"] > 1 and result["steps"]["p95"] >= result["steps"]["mean"]


def test_the_map_runs_at_most_concurrency_cases_at_once(
    stack: LocalStack, ten: tuple[str, dict[str, Any]]
) -> None:
    _, result = ten
    spans = []
    for case in result["cases"]:
        run = wait_for_run(stack, case["run_id"])
        spans.append((datetime.fromisoformat(run["created_at"]), datetime.fromisoformat(run["finished_at"])))
    most = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
    assert 1 <= most <= 4, spans


def test_the_eval_run_writes_events_and_lists_with_its_suite(
    stack: LocalStack, ten: tuple[str, dict[str, Any]]
) -> None:
    eval_id, result = ten
    status, _, page = stack.invoke_api("GET", f"/v1/evals/{eval_id}/runs/{result['eval_run_id']}/events")
    assert status == 200, page
    types = [e["type"] for e in page["events"]]
    assert types[0] == "eval_run_started" and types[-1] == "eval_run_completed" and page["done"]
    assert types.count("eval_case_completed") == 10
    assert sorted(e["data"]["done"] for e in page["events"] if e["type"] == "eval_case_completed") == list(
        range(1, 11)
    )
    status, _, listed = stack.invoke_api("GET", f"/v1/evals/{eval_id}/runs")
    assert status == 200 and listed["runs"][0]["eval_run_id"] == result["eval_run_id"]
    status, _, suites = stack.invoke_api("GET", "/v1/evals")
    assert status == 200 and any(s["eval_id"] == eval_id and s["cases"] == 10 for s in suites["evals"])


def test_a_worse_override_flips_what_passed_before_and_the_cli_exits_non_zero(
    stack: LocalStack, agent_id: str
) -> None:
    cases = [TEN[0][0], TEN[6][0], TEN[7][0]]
    eval_id = create_suite(stack, {"name": "regression", "agent_id": agent_id, "cases": cases})
    first = run_suite(stack, eval_id, concurrency=2)
    assert [c["passed"] for c in first["cases"]] == [True, True, True]
    # One step: the scripted model gets no tools on its last step, so no call is made.
    worse = run_suite(stack, eval_id, overrides={"max_steps": 1})
    assert worse["flipped"] == [1, 2] and worse["previous_eval_run_id"] == first["eval_run_id"]
    assert worse["steps_delta"] < 0  # against each fresh case's run in the previous eval run

    code, out = cli(stack, "eval", "run", "regression", "--max-steps", "1")  # by name, with a bar
    assert code == 0, out  # the previous eval run failed them already: nothing flips
    assert "3/3 cases" in out and "pass rate 33% (1/3)" in out
    fixed = run_suite(stack, eval_id)
    assert fixed["pass_rate"] == 1.0
    code, out = cli(stack, "eval", "run", eval_id, "--max-steps", "1", "--no-progress")
    assert code == 1, out  # passed in the previous eval run, fail now: CI stops here
    assert "FAIL (flipped)" in out and "flipped (passed before, fail now): 1, 2" in out


def cli(stack: LocalStack, *argv: str) -> tuple[int, str]:
    """The `stepwise` command against the stack in process (its HTTP through the gateway, no socket)."""
    from stepwise_cli import main

    def gateway(request: httpx.Request) -> httpx.Response:
        headers = [(k, v) for k, v in request.headers.items() if k in ("authorization", "content-type")]
        answer = stack.gateway.handle(
            request.method, request.url.path, request.url.query.decode(), headers, request.content
        )
        return httpx.Response(answer.status, headers=answer.headers, content=answer.body)

    out = io.StringIO()
    code = main(
        ["--url", "http://stack", "--key", "sk-local-dev", *argv],
        environ={},
        transport=httpx.MockTransport(gateway),
        stdout=out,
        stderr=out,
    )
    return code, out.getvalue()


def test_the_eval_run_completed_webhook_is_delivered(
    stack: LocalStack, agent_id: str, peer: Receiver
) -> None:
    status, _, _ = stack.invoke_api("POST", "/v1/webhooks/secret")
    assert status in (200, 201)
    eval_id = create_suite(
        stack,
        {
            "name": "hooked",
            "agent_id": agent_id,
            "cases": [TEN[0][0]],
            "webhook": {"url": peer.url + "/evals"},
        },
    )
    result = run_suite(stack, eval_id)

    def delivered() -> dict[str, Any]:
        found = [r.json() for r in peer.requests if r.path == "/evals"]
        assert found, "no delivery yet"
        return found[0]

    body = eventually(delivered, timeout=30, what="the eval_run.completed delivery")
    assert body["type"] == "eval_run.completed"
    assert body["data"]["eval_run_id"] == result["eval_run_id"] and body["data"]["pass_rate"] == 1.0


def test_recorded_runs_become_cases_by_filter_and_only_the_tenants_own(
    stack: LocalStack, agent_id: str
) -> None:
    recorded = []
    for tag in ("keep", "keep", None):
        status, _, accepted = stack.invoke_api(
            "POST",
            f"/v1/agents/{agent_id}/runs",
            {"message": "hi", "script": say("hello"), "metadata": {tag: True} if tag else {}},
        )
        assert status == 202, accepted
        recorded.append(wait_for_run(stack, accepted["run_id"])["run_id"])
    eval_id = create_suite(stack, {"name": "from runs", "agent_id": agent_id})
    status, _, added = stack.invoke_api(
        "POST", f"/v1/evals/{eval_id}/cases:from-runs", {"metadata_key": "keep", "last": 5}
    )
    assert status == 200, added
    assert added["added"] == recorded[1::-1] and added["cases"] == 2  # newest first, tagged only
    status, _, again = stack.invoke_api("POST", f"/v1/evals/{eval_id}/cases:from-runs", {"run_ids": recorded})
    assert status == 200 and again["added"] == [recorded[2]] and again["cases"] == 3  # no duplicates

    # Another tenant: its runs cannot be cases, named or filtered; its view of this suite is a 404.
    status, _, theirs = stack.invoke_api("POST", "/v1/agents", {"name": "theirs"}, key=OTHER_KEY)
    assert status == 201
    status, _, their_run = stack.invoke_api(
        "POST", f"/v1/agents/{theirs['agent_id']}/runs", {"message": "x", "script": say("y")}, key=OTHER_KEY
    )
    wait_for_run(stack, their_run["run_id"], key=OTHER_KEY)
    for body in ({"run_ids": [their_run["run_id"]]},):
        status, _, refused = stack.invoke_api("POST", f"/v1/evals/{eval_id}/cases:from-runs", body)
        assert (status, refused["error"]["code"]) == (404, "run_not_found")
    status, _, refused = stack.invoke_api(
        "POST", "/v1/evals", {"name": "x", "agent_id": agent_id, "cases": [{"run_id": their_run["run_id"]}]}
    )
    assert (status, refused["error"]["code"]) == (404, "run_not_found")
    status, _, refused = stack.invoke_api(
        "POST", f"/v1/evals/{eval_id}/cases:from-runs", {"agent_id": theirs["agent_id"]}
    )
    assert status == 200 and refused["added"] == []  # the filter reads this tenant's runs only
    status, _, hidden = stack.invoke_api("GET", f"/v1/evals/{eval_id}", key=OTHER_KEY)
    assert (status, hidden["error"]["code"]) == (404, "eval_not_found")


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "x", "cases": []}, 422, "validation_error"),  # no agent
        ({"name": "x", "agent_id": "AGENT", "assertions": [{"type": "nope"}]}, 422, "validation_error"),
        (
            {"name": "x", "agent_id": "AGENT", "assertions": [{"type": "regex", "value": "(a"}]},
            422,
            "validation_error",
        ),
        (
            {"name": "x", "agent_id": "AGENT", "assertions": [{"type": "regex", "value": "(?=a)"}]},
            422,
            "validation_error",
        ),
        (
            {"name": "x", "agent_id": "AGENT", "assertions": [{"type": "json_schema", "value": {"type": 5}}]},
            422,
            "validation_error",
        ),
        (
            {"name": "x", "agent_id": "AGENT", "assertions": [{"type": "tool_trajectory", "match": "SOME"}]},
            422,
            "validation_error",
        ),
        (
            {
                "name": "x",
                "agent_id": "AGENT",
                "cases": [{"message": "m", "run_id": "run_01H00000000000000000000000"}],
            },
            422,
            "validation_error",
        ),
        ({"name": "x", "agent_id": "agt_00000000000000000000000000"}, 404, "agent_not_found"),
        (
            {"name": "x", "agent_id": "AGENT", "cases": [{"run_id": "run_00000000000000000000000000"}]},
            404,
            "run_not_found",
        ),
    ],
)
def test_bad_suites_get_stable_codes(
    stack: LocalStack, agent_id: str, body: dict[str, Any], status: int, code: str
) -> None:
    if body.get("agent_id") == "AGENT":
        body = {**body, "agent_id": agent_id}
    got, _, refused = stack.invoke_api("POST", "/v1/evals", body)
    assert (got, refused["error"]["code"]) == (status, code), refused


def test_bad_eval_runs_get_stable_codes(stack: LocalStack, agent_id: str) -> None:
    empty = create_suite(stack, {"name": "empty", "agent_id": agent_id})
    fresh = create_suite(stack, {"name": "fresh", "agent_id": agent_id, "cases": [TEN[0][0]]})
    for path, body, status, code in [
        (f"/v1/evals/{empty}/runs", {}, 422, "no_cases"),
        (f"/v1/evals/{fresh}/runs", {"concurrency": 0}, 422, "validation_error"),
        (f"/v1/evals/{fresh}/runs", {"overrides": {"tools": [{"type": "nope"}]}}, 422, "validation_error"),
        (
            f"/v1/evals/{fresh}/runs",
            {"overrides": {"agent_id": "agt_00000000000000000000000000"}},
            404,
            "agent_not_found",
        ),
        ("/v1/evals/eval_00000000000000000000000000/runs", {}, 404, "eval_not_found"),
        ("/v1/evals/nope/runs", {}, 404, "eval_not_found"),
        (
            f"/v1/evals/{fresh}/cases:from-runs",
            {"created_after": "2026-01-02T00:00:00Z", "created_before": "2026-01-01T00:00:00Z"},
            422,
            "validation_error",
        ),
    ]:
        got, _, refused = stack.invoke_api("POST", path, body)
        assert (got, refused["error"]["code"]) == (status, code), (path, body, refused)
    got, _, refused = stack.invoke_api("GET", f"/v1/evals/{fresh}/runs/evr_00000000000000000000000000")
    assert (got, refused["error"]["code"]) == (404, "eval_run_not_found")
    got, _, refused = stack.invoke_api("POST", "/v1/evals", raw=b"{not json")
    assert got == 400, refused


def test_a_fresh_case_runs_the_agent_as_the_overrides_change_it(
    stack: LocalStack, agent_id: str, peer: Receiver
) -> None:
    looks_up = {"message": "look it up", "script": calling(CALLS[:1], "done")}
    eval_id = create_suite(stack, {"name": "changed", "agent_id": agent_id, "cases": [looks_up]})
    before = len(peer.requests)

    result = run_suite(stack, eval_id, overrides={"tools": [], "temperature": 0.1})

    unchanged = run_suite(stack, eval_id)

    runs = [stack.invoke_api("GET", f"/v1/runs/{r['cases'][0]['run_id']}")[2] for r in (result, unchanged)]
    assert [r["output"] for r in runs] == [
        "Step limit reached; tools withheld. You said: look it up",  # no tools: the call is withheld
        "done",  # its own agent's tools: lookup ran
    ]
    assert len(peer.requests) == before + 1


def test_a_recorded_run_is_replayed_what_if_and_compared_with_its_record(
    stack: LocalStack, agent_id: str
) -> None:
    """Needs section 1 (stepwise.evals.whatif, branch whatif): until it is merged the case cannot start
    and its result says `what_if_unavailable`."""
    status, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent_id}/runs", {"message": "find", "script": calling(CALLS, "found it")}
    )
    assert status == 202, accepted
    recorded = wait_for_run(stack, accepted["run_id"])
    assert recorded["status"] == "succeeded", recorded
    eval_id = create_suite(
        stack,
        {
            "name": "recorded",
            "agent_id": agent_id,
            "cases": [{"run_id": recorded["run_id"]}],
            "assertions": [
                {"type": "tool_trajectory", "match": "EXACT"},  # against the recorded run's calls
                {"type": "no_divergence"},
                {"type": "contains", "value": "found"},
            ],
        },
    )
    result = run_suite(stack, eval_id, overrides={"system_prompt": "Be brief."})
    case = result["cases"][0]
    assert case["error"] is None, case["error"]
    assert case["passed"], case["assertions"]
    assert case["baseline_run_id"] == recorded["run_id"] and case["compare"] is not None
    replay = wait_for_run(stack, case["run_id"])
    assert replay["trigger"] == "what_if" and replay["what_if_of"] == recorded["run_id"]
    assert result["steps_delta"] == 0


def test_a_large_suite_runs_its_cases_as_a_distributed_map(
    stack: LocalStack, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past DISTRIBUTED_ABOVE cases the Map is a Distributed Map (child executions); moto's interpreter
    runs that branch too. The threshold is lowered here so two cases take it."""
    from stepwise.evals import runner

    monkeypatch.setattr(runner, "DISTRIBUTED_ABOVE", 1)
    eval_id = create_suite(
        stack, {"name": "distributed", "agent_id": agent_id, "cases": [TEN[0][0], TEN[1][0]]}
    )
    result = run_suite(stack, eval_id, concurrency=2)
    assert result["status"] == "succeeded", result
    assert [c["passed"] for c in result["cases"]] == [True, False]
    import boto3

    from stepwise.core import config

    arn = (
        config.eval_machine().state_machine_arn.replace(":stateMachine:", ":execution:")
        + ":"
        + result["eval_run_id"]
    )
    history = boto3.client("stepfunctions").get_execution_history(executionArn=arn, maxResults=1000)["events"]
    entered = {e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e}
    assert "CasesDistributed" in entered and "Cases" not in entered, entered

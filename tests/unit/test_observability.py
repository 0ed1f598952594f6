"""Logs, traces and metrics (stepwise.core.observability) and the template's alarms and dashboard.

Handlers here are built like the ones in functions/: the same decorators from the same module. Metrics
are read back from what Powertools prints (EMF documents on stdout), logs from the `stepwise` logger's
own stream."""

from __future__ import annotations

import ast
import importlib.util
import io
import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from stepwise.core import observability
from stepwise.interactions.models import Interaction
from stepwise.llm.models import Usage
from stepwise.runs.models import Run
from stepwise_local.cfn_yaml import load_template
from stepwise_local.lambdas import LambdaContext

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "Stepwise"

Handler = Callable[[dict[str, Any], Any], Any]


def context(name: str = "StepFunction") -> LambdaContext:
    return LambdaContext(
        function_name=name,
        memory_limit_in_mb=512,
        invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{name}",
    )


def a_run(**fields: Any) -> Run:
    values = {
        "run_id": "run_1",
        "agent_id": "agt_1",
        "session_id": "ses_1",
        "status": "running",
        "input": "hi",
        "created_at": datetime(2025, 1, 1, tzinfo=UTC),
        **fields,
    }
    return Run.model_validate(values)


def an_interaction(kind: str, waited: timedelta) -> Interaction:
    created = datetime(2025, 1, 1, tzinfo=UTC)
    return Interaction(
        interaction_id="int_1",
        run_id="run_1",
        session_id="ses_1",
        agent_id="agt_1",
        kind=kind,
        status="answered",
        step=1,
        tool_call_id="call_1",
        tool_call_index=0,
        tool_name="send_email",
        arguments={},
        digest="d",
        timeout_seconds=300,
        answered_at=created + waited,
        created_at=created,
        deadline=created + timedelta(seconds=300),
    )


def emf(out: str) -> list[dict[str, Any]]:
    """The EMF documents among printed lines."""
    documents = []
    for line in out.splitlines():
        if line.startswith("{") and '"_aws"' in line:
            documents.append(json.loads(line))
    return documents


def value(document: dict[str, Any], name: str) -> float:
    """A metric's value in a document (Powertools writes a list of the values recorded)."""
    values = document[name]
    return float(sum(values)) if isinstance(values, list) else float(values)


def metric_names(document: dict[str, Any]) -> set[str]:
    return {m["Name"] for d in document["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}


def emf_interleaved(out: str) -> list[dict[str, Any]]:
    """The EMF documents in what threads printed at once: `print` writes a document and its newline
    separately, so two documents (or a log line) can share a line."""
    decoder, documents, at = json.JSONDecoder(), [], out.find("{")
    while at != -1:
        document, end = decoder.raw_decode(out, at)
        if "_aws" in document:
            documents.append(document)
        at = out.find("{", end)
    return documents


def handler_like_ours(body: Callable[[dict[str, Any]], Any]) -> Handler:
    """A handler decorated exactly as functions/*/app.py decorate theirs."""
    logger, metrics = observability.logger, observability.metrics()

    @logger.inject_lambda_context(clear_state=True)
    @metrics.log_metrics
    @observability.traced
    def handler(event: dict[str, Any], context: Any) -> Any:
        observability.bind(
            tenant_id=event.get("tenant_id"), run_id=event.get("run_id"), step=event.get("step")
        )
        return body(event)

    return handler


@pytest.fixture(autouse=True)
def _metrics_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Lambda environment (template.yaml's Globals), and a metric set that starts empty."""
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", NAMESPACE)
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", observability.SERVICE)
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.delenv("POWERTOOLS_DEV", raising=False)
    observability.metrics().clear_metrics()
    yield
    observability.metrics().clear_metrics()


@pytest.fixture
def log_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """Every line the `stepwise` logger writes from here on, parsed, at DEBUG (the most it ever says)."""
    handler = observability.logger.registered_handler
    stream = io.StringIO()
    previous_stream = handler.setStream(stream)  # type: ignore[attr-defined]
    previous_level = observability.logger.log_level
    observability.logger.setLevel("DEBUG")
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]
    observability.logger.setLevel(previous_level)
    handler.setStream(previous_stream)  # type: ignore[attr-defined]


# --- Metrics --------------------------------------------------------------------------------------


def test_a_model_step_flushes_steps_and_tokens_as_one_emf_document(
    capsys: pytest.CaptureFixture[str],
) -> None:
    usage = Usage(input_tokens=120, output_tokens=30, cached_tokens=100, cache_write_tokens=20, cost_usd=None)
    handler = handler_like_ours(lambda _: observability.step_taken(usage, "acme"))

    handler({"tenant_id": "acme", "run_id": "run_1", "step": 0}, context())

    (document,) = emf(capsys.readouterr().out)  # no cost document: the model has no known price
    recorded = {name: value(document, name) for name in metric_names(document)}
    assert recorded == {
        "Steps": 1,
        "InputTokens": 120,
        "OutputTokens": 30,
        "CachedTokens": 100,
        "CacheWriteTokens": 20,
    }
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == NAMESPACE
    assert directive["Dimensions"] == [["service"]] and document["service"] == "stepwise"


def test_a_priced_model_step_emits_its_cost_with_the_tenant_as_a_property(
    capsys: pytest.CaptureFixture[str],
) -> None:
    usage = Usage(input_tokens=1000, output_tokens=10, cost_usd=0.0042)
    handler_like_ours(lambda _: observability.step_taken(usage, "acme"))({}, context())

    documents = emf(capsys.readouterr().out)
    (cost,) = [d for d in documents if "CostUSD" in metric_names(d)]
    assert value(cost, "CostUSD") == 0.0042 and cost["tenant_id"] == "acme"
    (directive,) = cost["_aws"]["CloudWatchMetrics"]
    assert directive["Dimensions"] == [["service"]]  # tenants are properties, never dimensions


def test_runs_started_and_succeeded_are_counted(capsys: pytest.CaptureFixture[str]) -> None:
    def body(_: dict[str, Any]) -> None:
        observability.run_started(a_run())
        observability.run_succeeded()

    handler_like_ours(body)({"tenant_id": "acme"}, context("FailedFunction"))

    (document,) = emf(capsys.readouterr().out)
    assert (value(document, "RunsStarted"), value(document, "RunsSucceeded")) == (1, 1)


def test_a_failure_and_a_tool_call_carry_their_property_in_their_own_document(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def body(_: dict[str, Any]) -> None:
        observability.tool_called("web_search")
        observability.tool_called("send_email")
        observability.run_failed("doom_loop")

    handler_like_ours(body)({"tenant_id": "acme"}, context("AwaitFunction"))

    documents = emf(capsys.readouterr().out)
    tools = [(value(d, "ToolCalls"), d["tool"]) for d in documents if "ToolCalls" in metric_names(d)]
    failures = [(value(d, "RunsFailed"), d["code"]) for d in documents if "RunsFailed" in metric_names(d)]
    assert tools == [(1, "web_search"), (1, "send_email")]
    assert failures == [(1, "doom_loop")]
    # properties are never dimensions: one metric per name, however many tools and codes there are
    for document in documents:
        assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]


def test_an_approval_records_how_long_it_waited_for_a_human(capsys: pytest.CaptureFixture[str]) -> None:
    def body(_: dict[str, Any]) -> None:
        for interaction in (
            an_interaction("approval", timedelta(seconds=42.5)),
            an_interaction("client_tool", timedelta(seconds=7)),  # not a human's wait
        ):
            observability.answered(interaction.kind, interaction.created_at, interaction.answered_at)

    handler_like_ours(body)({}, context("ApiFunction"))

    (document,) = emf(capsys.readouterr().out)
    assert value(document, "ApprovalWaitSeconds") == 42.5
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Metrics"] == [{"Name": "ApprovalWaitSeconds", "Unit": "Seconds"}]


def test_concurrent_invocations_in_one_process_lose_no_data_point(capsys: pytest.CaptureFixture[str]) -> None:
    """The local stack runs handlers on threads of one process, sharing its metric set: a flush must
    neither trip over another thread's add nor clear a point it did not print."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch as often as they can: the race showed in one CI run in ~20
    threads, invocations = 8, 40
    handler = handler_like_ours(lambda _: observability.step_taken(Usage(input_tokens=3), "acme"))
    start = threading.Barrier(threads)
    failures: list[BaseException] = []

    def invoke_many() -> None:
        start.wait()
        for _ in range(invocations):
            try:
                handler({"tenant_id": "acme"}, context("StepFunction"))
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                failures.append(exc)

    workers = [threading.Thread(target=invoke_many) for _ in range(threads)]
    try:
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(previous)

    documents = emf_interleaved(capsys.readouterr().out)
    assert failures == []
    assert sum(value(d, "Steps") for d in documents if "Steps" in metric_names(d)) == threads * invocations
    assert sum(value(d, "InputTokens") for d in documents if "InputTokens" in metric_names(d)) == (
        3 * threads * invocations
    )


def test_a_handler_that_records_nothing_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    result = handler_like_ours(lambda _: "ok")({}, context("AuthorizerFunction"))

    assert result == "ok"
    assert emf(capsys.readouterr().out) == []


def test_disabled_metrics_print_nothing_and_accumulate_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")  # what `make run` sets

    def body(_: dict[str, Any]) -> None:
        for _ in range(150):  # past Powertools' 100 values, where it would print even when disabled
            observability.step_taken(Usage(input_tokens=1), "acme")
        observability.tool_called("web_search")
        observability.run_failed("internal_error")

    handler_like_ours(body)({}, context())

    assert capsys.readouterr().out == ""
    assert observability.metrics().metric_set == {}


def test_the_facade_is_the_only_way_domain_code_reaches_powertools_metrics() -> None:
    """Handlers flush, observability records; no other module imports Metrics."""
    offenders = []
    for path in (ROOT / "shared" / "stepwise").rglob("*.py"):
        if path.name == "observability.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aws_lambda_powertools"):
                names = {alias.name for alias in node.names}
                if "metrics" in (node.module or "") or names & {"Metrics", "single_metric", "Tracer"}:
                    offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


# --- Logs -----------------------------------------------------------------------------------------


def test_lines_after_the_run_is_loaded_carry_tenant_run_session_and_step(
    log_lines: Callable[[], list[dict[str, Any]]],
) -> None:
    def body(event: dict[str, Any]) -> None:
        observability.bind_run(a_run(session_id="ses_42"), step=event["step"] + 1)
        observability.logger.warning("something to say")

    handler_like_ours(body)({"tenant_id": "acme", "run_id": "run_1", "step": 2}, context())

    (line,) = [line for line in log_lines() if line["message"] == "something to say"]
    assert {k: line[k] for k in ("tenant_id", "run_id", "session_id", "agent_id", "step")} == {
        "tenant_id": "acme",
        "run_id": "run_1",
        "session_id": "ses_42",
        "agent_id": "agt_1",
        "step": 3,
    }
    assert line["function_name"] == "StepFunction" and line["service"] == "stepwise"


def test_the_next_invocation_does_not_inherit_the_previous_runs_keys(
    log_lines: Callable[[], list[dict[str, Any]]],
) -> None:
    """Lambda reuses the process: a warm start must not name the previous run's session."""

    def body(event: dict[str, Any]) -> None:
        if event.get("bind"):
            observability.bind_run(a_run(session_id="ses_old"))
        observability.logger.info("done")

    handler = handler_like_ours(body)
    handler({"tenant_id": "acme", "run_id": "run_old", "bind": True}, context())
    handler({"tenant_id": "acme", "run_id": "run_new"}, context())

    old, new = [line for line in log_lines() if line["message"] == "done"]
    assert old["session_id"] == "ses_old"
    assert new["run_id"] == "run_new" and "session_id" not in new


def test_stdlib_loggers_under_stepwise_share_the_json_format_and_keys(
    log_lines: Callable[[], list[dict[str, Any]]],
) -> None:
    import logging

    def body(_: dict[str, Any]) -> None:
        logging.getLogger("stepwise.schedules.triggers").warning("nothing started: %s", "disabled")

    handler_like_ours(body)({"tenant_id": "acme", "run_id": "run_1", "step": 0}, context())

    (line,) = [line for line in log_lines() if line["message"].startswith("nothing started")]
    assert line["tenant_id"] == "acme" and line["run_id"] == "run_1"


def load_handler(function: str, name: str = "handler") -> tuple[ModuleType, Handler]:
    """A fresh import of functions/<function>/app.py, as a cold start does."""
    path = ROOT / "functions" / function / "app.py"
    spec = importlib.util.spec_from_file_location(f"_fresh_{function}_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, getattr(module, name)


def test_the_authorizer_never_logs_the_key_even_when_told_to_log_events(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    log_lines: Callable[[], list[dict[str, Any]]],
) -> None:
    from stepwise.store import keys

    secret = "sk-live-5f0c2c1d9a8e4b7f"
    monkeypatch.setattr(keys, "owner", {secret: ("acme", "ci")}.get)  # the key table, in memory
    monkeypatch.setenv("POWERTOOLS_LOGGER_LOG_EVENT", "true")  # an operator's debugging switch
    _, handler = load_handler("authorizer")
    event = {
        "type": "REQUEST",
        "routeKey": "GET /v1/agents",
        "rawPath": "/v1/agents",
        "headers": {"authorization": f"Bearer {secret}"},
        "identitySource": [f"Bearer {secret}"],
        "requestContext": {"requestId": "req-123", "http": {"method": "GET", "path": "/v1/agents"}},
    }

    allowed = handler(event, context("AuthorizerFunction"))
    rejected = handler(
        {**event, "headers": {"authorization": f"Bearer {secret}x"}}, context("AuthorizerFunction")
    )

    assert allowed == {"isAuthorized": True, "context": {"tenant_id": "acme", "key_name": "ci"}}
    assert rejected["context"] == {"auth_error": "invalid_api_key"}
    captured = capsys.readouterr()
    everything = json.dumps(log_lines()) + captured.out + captured.err
    assert secret not in everything


@pytest.mark.parametrize(
    ("function", "name"),
    [("api", "handler"), ("authorizer", "handler"), ("await", "handler")],
)
def test_functions_whose_events_carry_credentials_pin_log_event_off(function: str, name: str) -> None:
    """API keys (authorizer, API), setting values and approval tokens (API), task tokens (Notify)."""
    source = (ROOT / "functions" / function / "app.py").read_text()
    decorator = next(
        d
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name == name
        for d in node.decorator_list
        if "inject_lambda_context" in ast.unparse(d)
    )
    assert isinstance(decorator, ast.Call)
    assert {k.arg: ast.unparse(k.value) for k in decorator.keywords}.get("log_event") == "False"


# --- Handlers and tracing -------------------------------------------------------------------------


def handlers() -> Iterator[tuple[str, ast.FunctionDef]]:
    # Parsed once: this runs at collection, in every pytest worker, and the template takes a second or
    # two to parse (27 parses here were half a minute of each worker's start).
    resources = list(load_template(ROOT / "template.yaml")["Resources"].values())
    for path in sorted((ROOT / "functions").glob("*/app.py")):
        template_handlers = {
            res["Properties"]["Handler"].rpartition(".")[2]
            for res in resources
            if res["Type"] == "AWS::Serverless::Function"
            and res["Properties"]["CodeUri"].rstrip("/") == f"functions/{path.parent.name}"
        }
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name in template_handlers:
                yield f"{path.parent.name}.{node.name}", node


HANDLERS = list(handlers())


@pytest.mark.parametrize(("name", "node"), HANDLERS, ids=[name for name, _ in HANDLERS])
def test_every_handler_logs_flushes_metrics_and_traces(name: str, node: ast.FunctionDef) -> None:
    decorators = [ast.unparse(d) for d in node.decorator_list]

    assert len(decorators) == 3, decorators
    assert decorators[0].startswith("logger.inject_lambda_context(") and "clear_state=True" in decorators[0]
    assert decorators[1] == "metrics.log_metrics"
    assert decorators[2] == "observability.traced"  # innermost: spans are flushed before metrics


# --- template.yaml: the alarms and the dashboard read the metrics the code writes -----------------


def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


def resources(kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template()["Resources"].items() if r["Type"] == kind}


def test_the_functions_environment_names_the_namespace_and_service_the_alarms_use() -> None:
    env = template()["Globals"]["Function"]["Environment"]["Variables"]

    assert env["POWERTOOLS_METRICS_NAMESPACE"] == NAMESPACE
    assert env["POWERTOOLS_SERVICE_NAME"] == observability.SERVICE


def custom_metrics_in_alarms() -> list[dict[str, Any]]:
    found = []
    for alarm in resources("AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        metrics = [q["MetricStat"]["Metric"] for q in props.get("Metrics", []) if "MetricStat" in q]
        if "MetricName" in props:
            metrics.append(props)
        found += [m for m in metrics if not m["Namespace"].startswith("AWS/")]
    return found


def test_alarms_on_custom_metrics_name_metrics_the_code_records() -> None:
    metrics = custom_metrics_in_alarms()

    assert {m["MetricName"] for m in metrics} == {"RunsStarted", "RunsFailed"}
    for metric in metrics:
        assert metric["MetricName"] in observability.METRIC_NAMES
        assert metric["Namespace"] == NAMESPACE
        assert metric["Dimensions"] == [{"Name": "service", "Value": observability.SERVICE}]


def test_every_alarm_notifies_the_alarm_topic() -> None:
    alarms = resources("AWS::CloudWatch::Alarm")

    assert len(alarms) >= 7
    for name, alarm in alarms.items():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": "AlarmTopic"}], name
        assert alarm["Properties"]["TreatMissingData"] == "notBreaching", name


def test_the_email_subscription_exists_only_with_an_address() -> None:
    subscription = resources("AWS::SNS::Subscription")["AlarmEmailSubscription"]

    assert subscription["Condition"] == "HasAlarmEmail"
    assert template()["Parameters"]["AlarmEmail"]["Default"] == ""
    assert template()["Conditions"]["HasAlarmEmail"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmEmail"}, ""]}]
    }


def test_state_machine_alarms_use_its_fixed_name_not_a_reference() -> None:
    """A Ref to the state machine would make it a dependency; the ARN from its fixed name is the same."""
    arn = template()["Globals"]["Function"]["Environment"]["Variables"]["STATE_MACHINE_ARN"]
    state_alarms = [
        a["Properties"]
        for a in resources("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("Namespace") == "AWS/States"
    ]

    assert {a["MetricName"] for a in state_alarms} == {"ExecutionsFailed", "ExecutionsTimedOut"}
    for alarm in state_alarms:
        assert alarm["Dimensions"] == [{"Name": "StateMachineArn", "Value": arn}]


def dashboard_body() -> tuple[str, dict[str, Any]]:
    """The body with every ${...} replaced by a plausible value, parsed."""
    (dashboard,) = resources("AWS::CloudWatch::Dashboard").values()
    text = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
    assert isinstance(text, str)
    return text, json.loads(re.sub(r"\$\{([^}]+)\}", lambda m: m.group(1).replace(":", "-"), text))


def test_the_dashboard_body_is_json_whose_references_exist() -> None:
    text, body = dashboard_body()
    known = set(template()["Resources"]) | {
        "AWS::Region",
        "AWS::Partition",
        "AWS::AccountId",
        "AWS::StackName",
    }

    referenced = {name.split(".")[0] for name in re.findall(r"\$\{([^}]+)\}", text)}
    assert referenced <= known
    assert all(w["type"] in {"metric", "alarm", "text"} for w in body["widgets"])


def test_the_dashboard_shows_every_metric_the_code_records_and_every_alarm() -> None:
    text, body = dashboard_body()
    shown = {row[1] for w in body["widgets"] if w["type"] == "metric" for row in w["properties"]["metrics"]}
    rows = [row for w in body["widgets"] if w["type"] == "metric" for row in w["properties"]["metrics"]]

    assert shown >= observability.METRIC_NAMES
    for row in rows:
        if row[0] == NAMESPACE:
            assert row[1] in observability.METRIC_NAMES and row[2:4] == ["service", observability.SERVICE]
    assert {"Duration", "Errors", "ExecutionsFailed", "ExecutionsTimedOut"} <= shown
    for alarm in resources("AWS::CloudWatch::Alarm"):
        assert "${" + alarm + ".Arn}" in text

"""Structural invariants of template.yaml that cfn-lint cannot know about.

cfn-lint and `sam validate --lint` check that the template is valid CloudFormation; these check that
it is Stepwise: handlers exist, litellm stays out of the API, tables are tenant-first and durable,
the state machine's substitutions and the ASL agree, and every private route is behind the
authorizer. No AWS and no moto: the template, the ASL and the code are read from disk.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import ManualArgs, lint
from pynamodb.indexes import GlobalSecondaryIndex
from pynamodb.models import Model

from stepwise.api.auth import is_public
from stepwise.api.resolver import DEFAULT_ROUTE
from stepwise.core import config, tables
from stepwise.loop.await_ import WaitEvent
from stepwise.runs.state import FailedState, RunState
from stepwise_local.cfn_yaml import load_template

pytestmark = pytest.mark.contract

ROOT = Path(__file__).resolve().parents[2]
ASL = ROOT / "statemachine" / "agent_run.asl.json"
LOCK = ROOT / "requirements" / "main.lock"

# Partition keys that are the tenant id, or "<tenant_id>#<id>" composites built by tables.tenant_key.
TENANT_KEYS = {"tenant_id", "pk", "run_key", "agent_key", "session_key"}
# Looked up by the hash of the presented key, before any tenant is known; the item names the tenant.
# McpAuthTable likewise: the public OAuth callback finds an authorization by its state's hash; grants in
# it are "grant#<tenant_id>#...", and every value is ciphertext bound to its tenant.
TENANTLESS_TABLES = {"ApiKeysTable": "key_hash", "McpAuthTable": "id"}
# Shared with Powertools' idempotency utility, whose records' keys hash the tenant with the
# Idempotency-Key (another tenant's identical key is another item); our start keys (StartKeyItem) put
# the tenant first, through tenant_key, as every other table does.
POWERTOOLS_TABLES = {"IdempotencyTable": "id"}
# Indexes looked up before any tenant is known. AgentsTable's by_a2a: the public A2A agent card names
# only the agent; the sparse index (agents whose a2a door is open) is keys-only, so it yields the
# agent's tenant_id, and the agent is then read under that tenant like any other.
# TriggersTable: the public webhook intake knows only the trigger id, so that is the partition key
# (`pk`); the trigger item names its tenant, checked on every authenticated read, and the sparse
# by_tenant index (tenant first) lists a tenant's triggers.
TENANTLESS_INDEX_KEYS = {"AgentsTable": {"a2a_id"}, "TriggersTable": {"pk"}}


@cache
def template() -> dict[str, Any]:
    return load_template(ROOT / "template.yaml")


def resources(kind: str) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in template()["Resources"].items() if r["Type"] == kind}


def functions() -> dict[str, dict[str, Any]]:
    return resources("AWS::Serverless::Function")


def setting(function: str, key: str) -> Any:
    """A function property as SAM resolves it: the function's own value, else the Globals one."""
    own = functions()[function]["Properties"]
    return own.get(key, template()["Globals"]["Function"].get(key))


def layers(function: str) -> list[str]:
    """Globals layers followed by the function's own (SAM merges lists by appending)."""
    own = functions()[function]["Properties"].get("Layers", [])
    return [layer["Ref"] for layer in [*template()["Globals"]["Function"].get("Layers", []), *own]]


def http_routes() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for function, resource in functions().items():
        for event in resource["Properties"].get("Events", {}).values():
            if event["Type"] == "HttpApi":
                yield function, f"{event['Properties']['Method']} {event['Properties']['Path']}", event


def asl_tasks(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Task state, including those inside Map and Parallel states."""
    for name, state in states.items():
        if state["Type"] == "Task":
            yield name, state
        for nested in [state.get("ItemProcessor") or state.get("Iterator"), *state.get("Branches", [])]:
            if nested:
                yield from asl_tasks(nested["States"])


def lock_versions() -> dict[str, str]:
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s\\;]+)", LOCK.read_text(), re.M)
    return {name.lower().replace("_", "-").replace(".", "-"): version for name, version in pins}


# --- Functions and layers -----------------------------------------------------------------------


@pytest.mark.parametrize("function", sorted(functions()))
def test_every_handler_exists(function: str) -> None:
    code_uri = ROOT / setting(function, "CodeUri")
    module, _, name = setting(function, "Handler").rpartition(".")
    source = code_uri / f"{module.replace('.', '/')}.py"

    assert source.is_file(), f"{function}: {source.relative_to(ROOT)} does not exist"
    defined = {
        node.name
        for node in ast.parse(source.read_text()).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert name in defined, f"{function}: {source.relative_to(ROOT)} defines no top-level {name}()"


def test_only_the_model_step_ships_litellm() -> None:
    with_model_deps = {f for f in functions() if "ModelDepsLayer" in layers(f)}

    assert with_model_deps == {"StepFunction"}
    assert "ModelDepsLayer" not in layers("ApiFunction")


def test_the_events_routes_are_served_by_the_light_events_function() -> None:
    served = {key: function for function, key, _ in http_routes()}
    keys = ("GET /v1/runs/{run_id}/events", "GET /v1/runs/{run_id}/stream", "POST /v1/runs/{run_id}/follow")

    assert {served[key] for key in keys} == {"EventsFunction"}
    assert setting("EventsFunction", "MemorySize") <= 256
    assert functions()["EventsFunction"]["Properties"].get("Layers") is None  # no ModelDepsLayer


def _writes_events(function: str) -> bool:
    return {"Ref": "RunEventsAppendPolicy"} in functions()[function]["Properties"].get("Policies", [])


@pytest.mark.parametrize("function", sorted(f for f in functions() if _writes_events(f)))
def test_every_function_that_appends_events_may_push_them_to_followers(function: str) -> None:
    """stepwise.runs.events.emit posts each append to the run's followers: FollowersTable and @connections."""
    assert {"Ref": "FollowPushPolicy"} in functions()[function]["Properties"]["Policies"]


def test_the_follow_websocket_api_is_served_by_the_events_function() -> None:
    (api,) = resources("AWS::ApiGatewayV2::Api")
    assert resources("AWS::ApiGatewayV2::Api")[api]["Properties"]["ProtocolType"] == "WEBSOCKET"
    declared = resources("AWS::ApiGatewayV2::Route").values()
    routes = {r["Properties"]["RouteKey"]: r["Properties"] for r in declared}
    integrations = resources("AWS::ApiGatewayV2::Integration")
    (authorizer,) = resources("AWS::ApiGatewayV2::Authorizer").values()

    assert set(routes) == {"$connect", "$disconnect"}
    for props in routes.values():
        target = props["Target"]["Fn::Sub"].removeprefix("integrations/${").removesuffix("}")
        assert "${EventsFunction.Arn}" in integrations[target]["Properties"]["IntegrationUri"]["Fn::Sub"]
    assert routes["$connect"]["AuthorizationType"] == "CUSTOM"
    assert "${EventsFunction.Arn}" in authorizer["Properties"]["AuthorizerUri"]["Fn::Sub"]
    assert authorizer["Properties"]["IdentitySource"] == ["route.request.querystring.token"]


@pytest.mark.parametrize("function", sorted(functions()))
def test_every_function_gets_its_dependencies_and_stepwise(function: str) -> None:
    assert {"CoreDepsLayer", "StepwiseLayer"} <= set(layers(function))
    assert len(layers(function)) == len(set(layers(function))), "a layer is listed twice"
    assert len(layers(function)) <= 5, "Lambda allows five layers per function"


def test_layer_requirements_are_generated_from_the_lock() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "layers" / "pin.py"), "--check"], capture_output=True, text=True
    )

    assert result.returncode == 0, f"run `.venv/bin/python layers/pin.py`:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("layer", ["core", "model"])
def test_layer_pins_match_the_lock(layer: str) -> None:
    lock = lock_versions()
    text = (ROOT / "layers" / layer / "requirements.txt").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9][^=\[\s]*)(?:\[[^\]]*\])?==(\S+)$", text, re.M))

    assert pins, f"layers/{layer}/requirements.txt pins nothing"
    assert {name: version for name, version in pins.items() if lock.get(name) != version} == {}
    assert ("litellm" in pins) == (layer == "model"), "litellm belongs to the model layer only"


def test_snapstart_functions_are_invoked_through_their_alias() -> None:
    """SnapStart applies to published versions only: an unqualified reference would run $LATEST, cold."""
    for function, resource in functions().items():
        if "SnapStart" not in resource["Properties"]:
            continue
        assert resource["Properties"].get("AutoPublishAlias"), function
        assert {"Fn::GetAtt": [function, "Arn"]} not in _state_machine()["DefinitionSubstitutions"].values()
        for other, props in functions().items():
            variables = props["Properties"].get("Environment", {}).get("Variables", {})
            assert {"Ref": function} not in variables.values(), f"{other} names {function} unqualified"


# --- Tables -------------------------------------------------------------------------------------


@pytest.mark.parametrize("table", sorted(resources("AWS::DynamoDB::Table")))
def test_tables_are_durable(table: str) -> None:
    resource = resources("AWS::DynamoDB::Table")[table]
    props = resource["Properties"]

    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["SSESpecification"]["SSEEnabled"] is True
    assert resource["DeletionPolicy"] == resource["UpdateReplacePolicy"] == "Retain"
    assert "TableName" not in props, "generated names let stepwise-dev and stepwise-prod share an account"


@pytest.mark.parametrize("table", sorted(resources("AWS::DynamoDB::Table")))
def test_tables_are_tenant_first(table: str) -> None:
    props = resources("AWS::DynamoDB::Table")[table]["Properties"]
    schemas = [props["KeySchema"], *(index["KeySchema"] for index in props.get("GlobalSecondaryIndexes", []))]
    hash_keys = {k["AttributeName"] for schema in schemas for k in schema if k["KeyType"] == "HASH"}

    if table in TENANTLESS_TABLES or table in POWERTOOLS_TABLES:
        assert hash_keys == {({**TENANTLESS_TABLES, **POWERTOOLS_TABLES})[table]}
        return
    hash_keys -= TENANTLESS_INDEX_KEYS.get(table, set())
    assert hash_keys <= TENANT_KEYS, (
        f"{table}: partition keys {hash_keys - TENANT_KEYS} are not tenant-scoped"
    )


def _models() -> dict[str, type[Model]]:
    found = [
        m for m in vars(tables).values() if isinstance(m, type) and issubclass(m, Model) and m is not Model
    ]
    return {m.Meta.table_name: m for m in found}


def test_every_table_has_a_store_model() -> None:
    assert set(_models()) == set(resources("AWS::DynamoDB::Table"))


@pytest.mark.parametrize("table", sorted(resources("AWS::DynamoDB::Table")))
def test_store_models_match_the_tables(table: str) -> None:
    props = resources("AWS::DynamoDB::Table")[table]["Properties"]
    model = _models()[table]
    types = {a["AttributeName"]: a["AttributeType"] for a in props["AttributeDefinitions"]}

    def keys(attributes: dict[str, Any]) -> set[tuple[str, str, str]]:
        return {
            (name, "HASH" if a.is_hash_key else "RANGE", a.attr_type)
            for name, a in attributes.items()
            if a.is_hash_key or a.is_range_key
        }

    def schema(key_schema: list[dict[str, str]]) -> set[tuple[str, str, str]]:
        return {(k["AttributeName"], k["KeyType"], types[k["AttributeName"]]) for k in key_schema}

    assert keys(model.get_attributes()) == schema(props["KeySchema"])
    indexes = {i.Meta.index_name: i for i in vars(model).values() if isinstance(i, GlobalSecondaryIndex)}
    declared = {g["IndexName"]: g for g in props.get("GlobalSecondaryIndexes", [])}
    assert set(indexes) == set(declared)
    for name, index in indexes.items():
        assert keys(index.Meta.attributes) == schema(declared[name]["KeySchema"]), name
        assert index.Meta.projection.projection_type == declared[name]["Projection"]["ProjectionType"]


def test_every_table_name_reaches_the_functions() -> None:
    env = template()["Globals"]["Function"]["Environment"]["Variables"]
    wanted = {field.alias for field in config.Tables.model_fields.values()}

    assert wanted <= set(env), f"missing from Globals: {wanted - set(env)}"
    assert {env[var]["Ref"] for var in wanted} == set(resources("AWS::DynamoDB::Table"))


# Set for the libraries that read them (Powertools, litellm); Stepwise never reads them.
LIBRARY_VARIABLES = {
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
    "LITELLM_LOCAL_MODEL_COST_MAP",
}


def test_every_variable_a_function_is_given_is_read_through_config() -> None:
    """A variable no config model reads is a setting that silently does nothing (or is read astray)."""
    given = set(template()["Globals"]["Function"]["Environment"]["Variables"])
    for function in functions().values():
        given |= set(function["Properties"].get("Environment", {}).get("Variables", {}))
    read = {
        field.alias for model in config.Environment.__subclasses__() for field in model.model_fields.values()
    }

    assert given - LIBRARY_VARIABLES <= read, (
        f"given but read by no config model: {given - LIBRARY_VARIABLES - read}"
    )


# --- State machine ------------------------------------------------------------------------------


def _target(value: dict[str, Any]) -> str | None:
    """The function a substitution names: `!GetAtt F.Arn`, or `!Ref F.Alias` (its AutoPublishAlias)."""
    if "Fn::GetAtt" in value:
        return str(value["Fn::GetAtt"][0])
    ref = value.get("Ref", "")
    return ref.removesuffix(".Alias") if isinstance(ref, str) and ref.endswith(".Alias") else None


def _state_machine() -> dict[str, Any]:
    props: dict[str, Any] = template()["Resources"]["AgentRunStateMachine"]["Properties"]
    return props


def test_substitutions_match_the_asl() -> None:
    placeholders = set(re.findall(r"\$\{([A-Za-z0-9_]+)\}", ASL.read_text()))

    assert _state_machine()["DefinitionUri"] == str(ASL.relative_to(ROOT))
    assert placeholders == set(_state_machine()["DefinitionSubstitutions"])


def test_the_state_machine_may_invoke_every_substituted_function() -> None:
    targets = {t for v in _state_machine()["DefinitionSubstitutions"].values() if (t := _target(v))}
    invocable = {
        policy["LambdaInvokePolicy"]["FunctionName"]["Ref"]
        for policy in _state_machine()["Policies"]
        if isinstance(policy, dict) and "LambdaInvokePolicy" in policy
    }

    assert targets <= set(functions())
    assert targets == invocable


def test_task_timeouts_cover_function_timeouts() -> None:
    """A Task that times out first abandons a Lambda that is still running (and may still write)."""
    by_placeholder = {
        f"${{{name}}}": target
        for name, value in _state_machine()["DefinitionSubstitutions"].items()
        if (target := _target(value))
    }
    for state, task in asl_tasks(json.loads(ASL.read_text())["States"]):
        function = by_placeholder.get(task.get("Parameters", {}).get("FunctionName", task["Resource"]))
        if function and "TimeoutSeconds" in task:
            assert task["TimeoutSeconds"] >= setting(function, "Timeout"), state


def test_the_asl_passes_cfn_lint() -> None:
    """cfn-lint never opens DefinitionUri, so lint the ASL inline in a plain state machine."""
    inline = {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Resources": {
            "StateMachine": {
                "Type": "AWS::StepFunctions::StateMachine",
                "Properties": {
                    "RoleArn": "arn:aws:iam::123456789012:role/stepwise",
                    "Definition": json.loads(ASL.read_text()),
                    "DefinitionSubstitutions": {
                        name: f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
                        for name in _state_machine()["DefinitionSubstitutions"]
                    },
                },
            }
        },
    }

    matches = lint(json.dumps(inline), config=ManualArgs(regions=["us-east-1"]))

    assert [str(m) for m in matches] == []


# --- HTTP API -----------------------------------------------------------------------------------


def test_routes_are_unique_and_on_the_http_api() -> None:
    keys = [key for _, key, _ in http_routes()]

    assert len(keys) == len(set(keys)), "a route is declared twice"
    assert all(event["Properties"]["ApiId"] == {"Ref": "HttpApi"} for _, _, event in http_routes())


def test_private_routes_use_the_default_authorizer() -> None:
    auth = template()["Resources"]["HttpApi"]["Properties"]["Auth"]
    assert auth["DefaultAuthorizer"] in auth["Authorizers"]

    for _, key, event in http_routes():
        authorizer = event["Properties"].get("Auth", {}).get("Authorizer", auth["DefaultAuthorizer"])
        # The API's own list of public paths (DESIGN.md: /v1/health, /v1/approvals/*, /v1/integrations/*).
        # The catch-all is answered 404 `route_not_found` before any key check (stepwise.api.resolver).
        public = is_public(key.split(" ", 1)[1]) or key == f"ANY {DEFAULT_ROUTE}"
        assert authorizer == ("NONE" if public else auth["DefaultAuthorizer"]), key


def test_the_authorizer_runs_for_every_request_with_or_without_a_key() -> None:
    # An identity source would let API Gateway refuse a request without Authorization itself (a bare
    # {"message": "Unauthorized"}); caching would let a revoked key in until the entry expires.
    auth = template()["Resources"]["HttpApi"]["Properties"]["Auth"]
    identity = auth["Authorizers"][auth["DefaultAuthorizer"]]["Identity"]
    assert identity == {"ReauthorizeEvery": 0}


def test_health_is_public() -> None:
    health = {key: (function, event) for function, key, event in http_routes()}["GET /v1/health"]

    assert health[0] == "ApiFunction"
    assert health[1]["Properties"]["Auth"]["Authorizer"] == "NONE"


# --- Sample events ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["api_health", "api_create_agent", "authorizer_request"])
def test_sample_http_events_name_declared_routes(name: str) -> None:
    event = json.loads((ROOT / "events" / f"{name}.json").read_text())

    assert event["version"] == "2.0"
    assert event["routeKey"] == event["requestContext"]["routeKey"]
    assert event["routeKey"] in {key for _, key, _ in http_routes()}
    assert event["rawPath"] == event["requestContext"]["http"]["path"]


@pytest.mark.parametrize(
    ("name", "model"), [("step", RunState), ("await", WaitEvent), ("failed", FailedState)]
)
def test_sample_step_events_are_valid_payloads(name: str, model: type[RunState | WaitEvent]) -> None:
    model.model_validate_json((ROOT / "events" / f"{name}.json").read_text())


def test_the_sample_webhook_batch_is_what_the_worker_reads() -> None:
    from aws_lambda_powertools.utilities.data_classes import SQSEvent

    from stepwise.webhooks.deliver import Message

    event = SQSEvent(json.loads((ROOT / "events" / "webhook_deliveries.json").read_text()))
    for record in event.records:
        Message.model_validate_json(record.body)


def test_the_webhook_queue_outlasts_the_retry_window_and_its_function() -> None:
    from stepwise.webhooks import deliver, retry

    queue = resources("AWS::SQS::Queue")["WebhookQueue"]["Properties"]
    function = functions()["WebhookFunction"]["Properties"]
    mapping = function["Events"]["Deliveries"]["Properties"]

    assert queue["MessageRetentionPeriod"] > retry.WINDOW.total_seconds() + max(retry.SCHEDULE)
    assert queue["VisibilityTimeout"] >= 6 * function["Timeout"]  # what Lambda asks of a polled queue
    assert max(retry.SCHEDULE) * (1 + retry.JITTER) <= 12 * 3600  # SQS hides a message 12 h at most
    assert "ReportBatchItemFailures" in mapping["FunctionResponseTypes"]
    # A batch's attempts, one after another, end before the function's timeout; a lease outlives an
    # attempt, so no second worker starts it, and ends before the message would come back on its own.
    assert mapping["BatchSize"] * deliver.ATTEMPT_TIMEOUT < function["Timeout"]
    assert deliver.ATTEMPT_TIMEOUT < deliver.LEASE_SECONDS < queue["VisibilityTimeout"]

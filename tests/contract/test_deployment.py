"""The deployment, safe by default: secrets, Bedrock and its bound, throttling and quotas, and the
production kit (access logs, dead letters, a run timeout), read from template.yaml, the ASL and
samconfig.toml. No AWS: the files are read from disk."""

from __future__ import annotations

import json
import tomllib
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from stepwise.core import credentials
from stepwise.hooks.models import ApprovalConfig
from stepwise.memory import service as memory
from stepwise_local.stack import parameter_env
from tests.contract import dynamodb_access as access
from tests.contract.test_dynamodb_grants import granted
from tests.contract.test_template import ASL, ROOT, functions, resources, template

pytestmark = pytest.mark.contract

# Functions that Lambda invokes asynchronously: EventBridge rules and Scheduler (Scheduler), rules and
# a schedule (Reconciler), the function itself (Events, a new follower's backlog).
ASYNC_FUNCTIONS = ("EventsFunction", "ReconcilerFunction", "SchedulerFunction")


def props(name: str) -> dict[str, Any]:
    return dict(template()["Resources"][name]["Properties"])


def env(function: str) -> dict[str, Any]:
    return {
        **template()["Globals"]["Function"]["Environment"]["Variables"],
        **props(function).get("Environment", {}).get("Variables", {}),
    }


def statements(function: str) -> list[dict[str, Any]]:
    found = []
    for policy in props(function).get("Policies", []):
        if isinstance(policy, dict) and "Statement" in policy:
            found += policy["Statement"]
        elif isinstance(policy, dict) and "Ref" in policy:
            found += props(policy["Ref"])["PolicyDocument"]["Statement"]
    return found


def secret_reads(function: str) -> set[str]:
    return {
        p["AWSSecretsManagerGetSecretValuePolicy"]["SecretArn"]["Ref"]
        for p in props(function).get("Policies", [])
        if isinstance(p, dict) and "AWSSecretsManagerGetSecretValuePolicy" in p
    }


def test_no_secret_is_a_parameter_or_a_plain_environment_variable() -> None:
    assert not [n for n, p in template()["Parameters"].items() if p.get("NoEcho")]
    for function in functions():
        assert not set(env(function)) & set(credentials.NAMES), function
    assert template()["Globals"]["Function"]["Environment"]["Variables"]["STEPWISE_SECRETS"] == "aws"


@pytest.mark.parametrize(
    ("function", "name"),
    [
        ("ApiFunction", credentials.SLACK_SIGNING_SECRET),
        ("StepFunction", credentials.OPENAI_API_KEY),
        ("StepFunction", credentials.ANTHROPIC_API_KEY),
    ],
)
def test_each_secret_is_a_secrets_manager_secret_its_function_may_read(function: str, name: str) -> None:
    ref = env(function)[name + credentials.ARN_SUFFIX]["Ref"]
    secret = template()["Resources"][ref]
    assert secret["Type"] == "AWS::SecretsManager::Secret"
    # The operator puts the value; until then the placeholder reads as "not set".
    assert secret["Properties"]["SecretString"] == credentials.PLACEHOLDER
    assert ref in secret_reads(function)


def test_the_model_step_may_invoke_bedrock_models_and_inference_profiles() -> None:
    granted = [s for s in statements("StepFunction") if "bedrock:InvokeModel" in s.get("Action", [])]
    assert len(granted) == 1
    assert set(granted[0]["Action"]) == {"bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"}
    arns = [r["Fn::Sub"] for r in granted[0]["Resource"]]
    assert any(":foundation-model/*" in a for a in arns)
    assert any(":inference-profile/*" in a for a in arns)
    assert any(":application-inference-profile/*" in a for a in arns)


def _embeds(function: str) -> bool:
    """Whether the function's code can reach the embedding of memories (stepwise.memory.service.embedder)."""
    reach = access.derive(access.handler_module(functions()[function])).reach
    return (memory.__name__, memory.embedder.__name__) in reach.items


def test_the_embedding_model_reaches_exactly_the_functions_that_embed() -> None:
    given = {f for f in functions() if env(f).get(memory.EMBEDDING_MODEL_ENV) == {"Ref": "EmbeddingModel"}}

    assert given == {f for f in functions() if _embeds(f)} == {"StepFunction"}
    assert memory.EMBEDDING_MODEL_ENV not in template()["Globals"]["Function"]["Environment"]["Variables"]
    assert parameter_env(template())["EmbeddingModel"] == memory.EMBEDDING_MODEL_ENV
    assert template()["Parameters"]["EmbeddingModel"]["Default"] == ""  # BM25 only unless asked


# litellm's bedrock/ embedding models (Titan and Cohere, on demand and through an inference profile).
BEDROCK_EMBEDDINGS = [
    "foundation-model/amazon.titan-embed-text-v2:0",
    "foundation-model/cohere.embed-multilingual-v3",
    "inference-profile/us.cohere.embed-v4:0",
]
REGION, ACCOUNT = "eu-west-1", "123456789012"


def _invokable(function: str, resource: str) -> bool:
    account = "" if resource.startswith("foundation-model/") else ACCOUNT  # AWS's models name no account
    arn = f"arn:aws:bedrock:{REGION}:{account}:{resource}"
    substituted = {"${AWS::Partition}": "aws", "${AWS::Region}": REGION, "${AWS::AccountId}": ACCOUNT}
    for statement in statements(function):
        if statement["Effect"] != "Allow" or "bedrock:InvokeModel" not in statement["Action"]:
            continue
        for pattern in statement["Resource"]:
            text = pattern["Fn::Sub"] if isinstance(pattern, dict) else pattern
            for name, value in substituted.items():
                text = text.replace(name, value)
            if fnmatchcase(arn, text):
                return True
    return False


@pytest.mark.parametrize("resource", BEDROCK_EMBEDDINGS)
def test_the_functions_that_embed_may_invoke_a_bedrock_embedding_model(resource: str) -> None:
    """No grant of its own: the model step's Bedrock grant covers the embedding model. A narrower
    model grant must then grant `bedrock:InvokeModel` on the EmbeddingModel parameter's model."""
    for function in (f for f in functions() if _embeds(f)):
        assert _invokable(function, resource), (function, resource)


@pytest.mark.parametrize(
    ("parameter", "variable"),
    [
        ("AllowedModels", "STEPWISE_ALLOWED_MODELS"),
        ("MaxActiveRuns", "STEPWISE_MAX_ACTIVE_RUNS"),
        ("MaxSchedules", "STEPWISE_MAX_SCHEDULES"),
    ],
)
def test_bounds_are_parameters_with_their_local_variables(parameter: str, variable: str) -> None:
    assert template()["Globals"]["Function"]["Environment"]["Variables"][variable] == {"Ref": parameter}
    assert parameter_env(template())[parameter] == variable


def test_prod_never_defaults_to_the_scripted_model() -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text())
    overrides = dict(
        o.split("=", 1) for o in config["prod"]["deploy"]["parameters"]["parameter_overrides"].split()
    )
    assert overrides["Stage"] == "prod"
    assert overrides.get("DefaultModel", "scripted") != "scripted"
    assert overrides.get("AllowedModels", "*") != "*"
    rule = template()["Rules"]["ProdNamesARealDefaultModel"]
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "Stage"}, "prod"]}
    assert rule["Assertions"][0]["Assert"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "DefaultModel"}, "scripted"]}]
    }


def test_the_http_api_is_throttled_logged_and_revokes_keys_within_a_minute() -> None:
    api = props("HttpApi")
    assert api["DefaultRouteSettings"] == {
        "ThrottlingRateLimit": {"Ref": "ApiThrottleRate"},
        "ThrottlingBurstLimit": {"Ref": "ApiThrottleBurst"},
    }
    log_group = api["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0]
    assert props(log_group)["RetentionInDays"] <= 90
    logged = json.loads(api["AccessLogSettings"]["Format"])
    assert "$context.identity.sourceIp" in logged.values()
    assert not any("authorization" in str(v).lower() or "body" in str(v) for v in logged.values())
    authorizer = api["Auth"]["Authorizers"]["ApiKeyAuthorizer"]
    assert authorizer["Identity"]["ReauthorizeEvery"] <= 60


def test_the_follow_websocket_stage_is_throttled_and_logged() -> None:
    stage = props("FollowStage")
    assert stage["DefaultRouteSettings"]["ThrottlingRateLimit"] == {"Ref": "ApiThrottleRate"}
    log_group = stage["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0]
    assert props(log_group)["RetentionInDays"] <= 90
    json.loads(stage["AccessLogSettings"]["Format"])


def test_the_model_step_has_reserved_concurrency_from_a_parameter() -> None:
    reserved = props("StepFunction")["ReservedConcurrentExecutions"]
    assert reserved == {
        "Fn::If": ["ReservesStepConcurrency", {"Ref": "StepReservedConcurrency"}, {"Ref": "AWS::NoValue"}]
    }
    assert template()["Parameters"]["StepReservedConcurrency"]["Default"] > 0


@pytest.mark.parametrize("function", ASYNC_FUNCTIONS)
def test_every_asynchronously_invoked_function_has_a_dead_letter_queue(function: str) -> None:
    assert props(function)["DeadLetterQueue"] == {
        "Type": "SQS",
        "TargetArn": {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]},
    }


def test_every_rule_and_schedule_target_has_a_dead_letter_queue() -> None:
    for function, resource in functions().items():
        for name, event in resource["Properties"].get("Events", {}).items():
            if event["Type"] in ("EventBridgeRule", "Schedule"):
                assert event["Properties"]["DeadLetterConfig"] == {
                    "Arn": {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}
                }, f"{function}.{name}"
    # Scheduler's twins: the API tells each one where to send, and Scheduler sends as this role.
    assert env("ApiFunction")["SCHEDULE_DLQ_ARN"] == {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}
    sends = [
        s
        for p in props("SchedulerInvokeRole")["Policies"]
        for s in p["PolicyDocument"]["Statement"]
        if s["Action"] == "sqs:SendMessage"
    ]
    assert sends and sends[0]["Resource"] == {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}
    queue_policy = props("DeadLetterQueuePolicy")["PolicyDocument"]["Statement"][0]
    assert queue_policy["Principal"] == {"Service": "events.amazonaws.com"}


def test_dead_letters_raise_an_alarm() -> None:
    alarm = props("DeadLetterQueueAlarm")
    assert alarm["Dimensions"][0]["Value"] == {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]}
    assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]


def test_a_run_has_a_timeout_longer_than_its_longest_legitimate_wait() -> None:
    definition = json.loads(Path(ASL).read_text())
    longest_approval = ApprovalConfig.model_fields["timeout"].metadata
    limit = next(m.le for m in longest_approval if hasattr(m, "le"))
    assert definition["TimeoutSeconds"] > limit
    assert definition["TimeoutSeconds"] <= 365 * 86400  # Step Functions Standard's own limit


def test_the_event_log_is_append_only_for_every_function() -> None:
    appenders = set()
    for function in functions():
        actions = {action for table, _, action in granted(function) if table == "RunEventsTable"}
        assert not actions & {"dynamodb:DeleteItem", "dynamodb:Scan", "dynamodb:PutItem"}, function
        if "dynamodb:BatchWriteItem" in actions:
            appenders.add(function)

    assert len(appenders) >= 5
    assert {"Ref": "RunEventsAppendPolicy"} in props("StepFunction")["Policies"]


def test_only_the_model_step_creates_interactions() -> None:
    creators = {f for f in functions() if ("InteractionsTable", "table", "dynamodb:PutItem") in granted(f)}
    deleters = {f for f in functions() if ("InteractionsTable", "table", "dynamodb:DeleteItem") in granted(f)}

    assert creators == {"StepFunction", "WorkflowFunction"}  # a workflow's approval node is one too
    assert deleters == set()


def test_every_function_that_moves_runs_or_schedules_may_move_the_quota_counters() -> None:
    writes = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
    writers = {
        function
        for function in functions()
        for table, _, action in granted(function)
        if table in ("RunsTable", "SchedulesTable") and action in writes
    }
    assert writers
    for function in writers:
        assert {"Ref": "QuotasPolicy"} in props(function)["Policies"], function
    actions = props("QuotasPolicy")["PolicyDocument"]["Statement"][0]["Action"]
    assert actions == ["dynamodb:UpdateItem"]


def test_the_dead_letter_queue_is_encrypted_and_kept_two_weeks() -> None:
    queue = resources("AWS::SQS::Queue")["DeadLetterQueue"]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True
    assert queue["MessageRetentionPeriod"] == 14 * 86400


# Actions that take no resource IAM can name, each with why: the only grants on Resource "*".
UNSCOPABLE = {
    "states:SendTaskSuccess": "a task token is not a resource",
    "states:SendTaskFailure": "a task token is not a resource",
    **{
        f"logs:{action}": "CloudWatch Logs vended delivery has no resource-level permissions"
        for action in (
            "CreateLogDelivery", "GetLogDelivery", "UpdateLogDelivery", "DeleteLogDelivery",
            "ListLogDeliveries", "PutResourcePolicy", "DescribeResourcePolicies", "DescribeLogGroups",
        )
    },
}  # fmt: skip


def _iam_statements() -> list[tuple[str, dict[str, Any]]]:
    """Every identity-policy statement of the template (inline on functions and state machines, and
    managed policies); key policies are not identity policies and say "*" for the key itself."""
    found = []
    for name, resource in template()["Resources"].items():
        properties = resource.get("Properties", {})
        for policy in properties.get("Policies", []) or []:
            if isinstance(policy, dict):
                found += [(name, s) for s in policy.get("Statement", [])]
        document = properties.get("PolicyDocument") if resource["Type"] == "AWS::IAM::ManagedPolicy" else None
        if document:
            found += [(name, s) for s in document["Statement"]]
    return found


def test_a_grant_on_every_resource_is_only_for_actions_that_take_none() -> None:
    broad = [
        (name, action)
        for name, statement in _iam_statements()
        if statement.get("Resource") == "*"
        for action in (
            statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        )
        if action not in UNSCOPABLE
    ]

    assert broad == []


def test_approval_mail_may_only_be_sent_from_the_configured_sender() -> None:
    [grant] = [s for s in statements("AwaitFunction") if "ses:SendEmail" in s["Action"]]

    assert grant["Resource"] != "*"
    assert grant["Condition"] == {"StringEquals": {"ses:FromAddress": {"Ref": "ApprovalSender"}}}

"""Review finding 8: who may decrypt what under SettingsKey, and who may rewrite the webhook signing
secret's item, read from template.yaml as IAM would evaluate it (Allow statements, their conditions on
the encryption context and the partition key, and Deny over Allow).

The webhook function only ever decrypts signing secrets; the Step decrypts settings, sealed headers and
MCP grants but never a signing secret, and can write webhook deliveries but not the secret's item
(whose UpdateItem, with ReturnValues, would hand it the ciphertext)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any

import pytest

from stepwise.webhooks.keys import CONTEXT_KEY
from tests.contract.test_template import functions, template

KEY = "kms:EncryptionContext:key"
LEADING = "dynamodb:LeadingKeys"
# SAM policy templates that grant on the settings key, as the statements SAM expands them to.
SAM_KMS = {"KMSDecryptPolicy": ["kms:Decrypt"], "KMSEncryptPolicy": ["kms:Encrypt"]}
# Those that grant nothing on KMS or DynamoDB (any other template fails the test: it must be read).
SAM_OTHER = {
    "AWSSecretsManagerGetSecretValuePolicy",
    "LambdaInvokePolicy",
    "S3CrudPolicy",
    "S3ReadPolicy",
    "SQSPollerPolicy",
    "StepFunctionsExecutionPolicy",
}


def _statements(function: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for policy in functions()[function]["Properties"].get("Policies", []):
        if isinstance(policy, dict) and "Statement" in policy:
            found.extend(policy["Statement"])
        elif isinstance(policy, dict) and "Ref" in policy:
            managed = template()["Resources"][policy["Ref"]]
            found.extend(managed["Properties"]["PolicyDocument"]["Statement"])
        else:
            (name,) = policy
            if name in SAM_KMS:
                target = policy[name]["KeyId"]["Ref"]
                found.append(
                    {"Effect": "Allow", "Action": SAM_KMS[name], "Resource": {"Fn::GetAtt": [target, "Arn"]}}
                )
            else:
                assert name in SAM_OTHER, f"{function}: read what {name} grants before trusting this test"
    return found


def _names(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _on(statement: dict[str, Any], action: str, resource: str) -> bool:
    actions = _names(statement["Action"])
    resources = _names(statement["Resource"])
    return any(fnmatchcase(action, a) for a in actions) and any(
        r == "*" or (isinstance(r, dict) and r.get("Fn::GetAtt", [None])[0] == resource) for r in resources
    )


def _holds(condition: dict[str, Any], context: dict[str, Any]) -> bool:
    for operator, tests in condition.items():
        for key, wanted in tests.items():
            given = context.get(key)
            patterns = [str(w) for w in _names(wanted)]
            if operator in ("StringEquals", "StringLike"):
                match = fnmatchcase if operator == "StringLike" else str.__eq__
                if given is None or not any(match(str(given), p) for p in patterns):
                    return False
            elif operator == "StringNotEquals":
                if given is not None and str(given) in patterns:
                    return False
            elif operator == "ForAllValues:StringLike":
                if not all(any(fnmatchcase(v, p) for p in patterns) for v in given or []):
                    return False
            else:
                raise AssertionError(f"condition operator {operator} is not evaluated here")
    return True


def allows(function: str, action: str, resource: str, context: dict[str, Any]) -> bool:
    matching = [
        s
        for s in _statements(function)
        if _on(s, action, resource) and _holds(s.get("Condition", {}), context)
    ]
    return any(s["Effect"] == "Allow" for s in matching) and not any(s["Effect"] == "Deny" for s in matching)


@pytest.mark.parametrize(
    ("context_key", "allowed"),
    [
        (CONTEXT_KEY, True),
        ("OPENAI_API_KEY", False),
        ("headers/Authorization", False),
        ("mcp-oauth/x", False),
    ],
)
def test_the_webhook_function_decrypts_signing_secrets_only(context_key: str, allowed: bool) -> None:
    assert allows("WebhookFunction", "kms:Decrypt", "SettingsKey", {KEY: context_key}) is allowed


@pytest.mark.parametrize(
    ("context_key", "allowed"),
    [(CONTEXT_KEY, False), ("OPENAI_API_KEY", True), ("headers/Authorization", True), ("mcp-oauth/x", True)],
)
def test_the_step_decrypts_what_its_tools_need_but_no_signing_secret(context_key: str, allowed: bool) -> None:
    assert allows("StepFunction", "kms:Decrypt", "SettingsKey", {KEY: context_key}) is allowed


@pytest.mark.parametrize("action", ["dynamodb:UpdateItem", "dynamodb:PutItem"])
def test_the_step_writes_webhook_deliveries_but_not_the_signing_secrets_item(action: str) -> None:
    assert allows("StepFunction", action, "WebhooksTable", {LEADING: ["acme#run_01"]})
    assert not allows("StepFunction", action, "WebhooksTable", {LEADING: ["acme"]})
    # The API still rotates the secret (pk = the tenant).
    assert allows("ApiFunction", action, "WebhooksTable", {LEADING: ["acme"]})

"""Each function of template.yaml is granted exactly the DynamoDB actions its code needs, per table.

moto does not enforce IAM: a grant that is too small only fails in AWS (AccessDenied), one too large
never fails at all. tests/contract/dynamodb_access.py derives what each function needs from its
handler's reachable code; these compare that with the template's statements, both ways.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency.persistence import dynamodb as powertools_dynamodb

from tests.contract import dynamodb_access as access
from tests.contract.test_template import functions, template

pytestmark = pytest.mark.contract

INDEX = re.compile(r"\$\{(\w+)\.Arn\}/index/\*")


def _statements(function: str) -> list[dict[str, Any]]:
    found = []
    for policy in functions()[function]["Properties"].get("Policies", []):
        if isinstance(policy, dict) and "Statement" in policy:
            found += policy["Statement"]
        elif isinstance(policy, dict) and "Ref" in policy:
            found += template()["Resources"][policy["Ref"]]["Properties"]["PolicyDocument"]["Statement"]
    return found


def _resource(value: Any) -> tuple[str, str]:
    """(table logical id, "table" | "index") of a statement's resource."""
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        name, attribute = target if isinstance(target, list) else target.split(".")
        assert attribute == "Arn", value
        return name, "table"
    if (
        isinstance(value, dict)
        and isinstance(value.get("Fn::Sub"), str)
        and INDEX.fullmatch(value["Fn::Sub"])
    ):
        return INDEX.fullmatch(value["Fn::Sub"]).group(1), "index"  # type: ignore[union-attr]
    raise AssertionError(f"a DynamoDB grant on {value!r}: name a table (!GetAtt T.Arn) or its indexes")


def _narrows_items(condition: Any) -> bool:
    """No condition, or one on the partition keys alone (which items, never which actions): e.g. the
    webhook deliveries but not the signing secret's item (review finding 8)."""
    return condition is None or (
        set(condition) == {"ForAllValues:StringLike"}
        and set(condition["ForAllValues:StringLike"]) == {"dynamodb:LeadingKeys"}
    )


def granted(function: str) -> set[access.Need]:
    found: set[access.Need] = set()
    for statement in _statements(function):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        dynamodb = [a for a in actions if a.startswith("dynamodb:")]
        if not dynamodb:
            continue
        assert statement["Effect"] == "Allow" and _narrows_items(statement.get("Condition")), statement
        assert not [a for a in dynamodb if "*" in a], f"{function}: a wildcard DynamoDB action"
        resources = (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        for resource in resources:
            table, where = _resource(resource)
            found |= {(table, where, action) for action in dynamodb}
    return found


def needed(function: str) -> access.Derived:
    return access.derive(access.handler_module(functions()[function]))


def _explain(derived: access.Derived, missing: set[access.Need]) -> list[str]:
    return [
        f"{need} for {item[0]}:{item[1]} (reached from {derived.reach.why.get(item, '?')})"
        for item, needs in sorted(derived.by_definition.items())
        for need in sorted(needs & missing)
    ]


@pytest.mark.parametrize("function", sorted(functions()))
def test_each_function_is_granted_exactly_the_dynamodb_actions_its_code_needs(function: str) -> None:
    derived = needed(function)
    grants = granted(function)

    missing = derived.needs - grants
    extra = grants - derived.needs

    assert not missing, "AccessDenied in AWS:\n" + "\n".join(_explain(derived, missing))
    assert not extra, f"granted but never used: {sorted(extra)}"


def test_no_function_uses_sam_dynamodb_policy_templates() -> None:
    """SAM's DynamoDBCrudPolicy and DynamoDBReadPolicy grant fixed sets (Scan, DeleteItem, the indexes):
    every DynamoDB grant is a statement with exactly its actions."""
    found = [
        (function, name)
        for function, resource in functions().items()
        for policy in resource["Properties"].get("Policies", [])
        for name in (policy if isinstance(policy, dict) else {policy: None})
        if "DynamoDB" in str(name)
    ]

    assert found == []


def test_every_receiver_and_client_is_resolved() -> None:
    for function in functions():
        assert needed(function).unresolved == [], function


def test_every_model_is_bound_to_a_template_table() -> None:
    tables = {name for name, r in template()["Resources"].items() if r["Type"] == "AWS::DynamoDB::Table"}

    assert set(access.model_tables()) == set(access.models())
    assert set(access.model_tables().values()) <= tables


def test_the_idempotency_actions_are_those_powertools_calls() -> None:
    tree = ast.parse(Path(powertools_dynamodb.__file__).read_text())
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and ast.unparse(node.func.value) == "self.client"
    }
    pascal = {"".join(part.title() for part in call.split("_")) for call in calls}

    [declared] = access.EXTERNAL.values()
    assert pascal == declared


# Known paths, so that the derivation is seen to find what the code does (and to stay sharp enough
# not to grant what it does not).
@pytest.mark.parametrize(
    ("function", "need", "present"),
    [
        # The authorizer reads a key by its hash, nothing else.
        ("AuthorizerFunction", ("ApiKeysTable", "table", "dynamodb:GetItem"), True),
        ("AuthorizerFunction", ("ApiKeysTable", "table", "dynamodb:Scan"), False),
        # A WebSocket follower is counted on the log's head as it connects (store.events.followed);
        # the A2A door answers and cancels tasks, which appends their events; nothing there scans.
        ("EventsFunction", ("RunEventsTable", "table", "dynamodb:UpdateItem"), True),
        # It starts runs for the protocol doors (a cancelled `interrupt` appends), never creates a pause.
        ("EventsFunction", ("RunsTable", "table", "dynamodb:PutItem"), True),
        ("EventsFunction", ("InteractionsTable", "table", "dynamodb:PutItem"), False),
        # It appends too since it serves the AG-UI door, whose answers add their decisions to the log.
        ("EventsFunction", ("RunEventsTable", "table", "dynamodb:BatchWriteItem"), True),
        ("AuthorizerFunction", ("RunEventsTable", "table", "dynamodb:BatchWriteItem"), False),
        ("EventsFunction", ("RunsTable", "table", "dynamodb:Scan"), False),
        # The reconciler's sweep scans the runs table; nothing else scans it.
        ("ReconcilerFunction", ("RunsTable", "table", "dynamodb:Scan"), True),
        ("ApiFunction", ("RunsTable", "table", "dynamodb:Scan"), False),
        # Only the model step creates interactions; a run listing queries the runs' indexes.
        ("StepFunction", ("InteractionsTable", "table", "dynamodb:PutItem"), True),
        ("AwaitFunction", ("InteractionsTable", "table", "dynamodb:PutItem"), False),
        ("ApiFunction", ("RunsTable", "index", "dynamodb:Query"), True),
        # Starting a run takes a quota slot inside the run's transaction.
        ("SchedulerFunction", ("QuotasTable", "table", "dynamodb:UpdateItem"), True),
        ("ApiFunction", ("IdempotencyTable", "table", "dynamodb:PutItem"), True),
    ],
)
def test_the_derivation_follows_known_paths(function: str, need: access.Need, present: bool) -> None:
    assert (need in needed(function).needs) is present

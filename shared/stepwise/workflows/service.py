"""Workflows: created, published as versions, each version compiled and deployed as its own state
machine (`<prefix>-<workflow_id>-v<n>`, the prefix the IAM policy scopes), listed, deleted."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from stepwise.core import aws, config
from stepwise.core.errors import NotFound, Unavailable, Unprocessable
from stepwise.core.ids import new_id
from stepwise.core.schema import utcnow
from stepwise.runs.ports import stores
from stepwise.tools.models import WorkflowTool
from stepwise.workflows import checks, compiler, store
from stepwise.workflows.models import (
    AgentNode,
    Definition,
    WorkflowAsl,
    WorkflowCreate,
    WorkflowList,
    WorkflowVersion,
    WorkflowVersions,
    WorkflowView,
    walk,
)


def not_found(workflow_id: str) -> NotFound:
    return NotFound(f"workflow {workflow_id} not found", code="workflow_not_found")


def machine_name(workflow_id: str, version: int) -> str:
    return f"{config.workflow_deploy().prefix}-{workflow_id}-v{version}"


def machine_arn(workflow_id: str, version: int) -> str:
    """In the account and region of the agent-run machine, which every function knows."""
    base = config.machine().state_machine_arn.rsplit(":", 1)[0]
    return f"{base}:{machine_name(workflow_id, version)}"


def execution_arn(workflow_id: str, version: int, run_id: str) -> str:
    return f"{machine_arn(workflow_id, version).replace(':stateMachine:', ':execution:', 1)}:{run_id}"


def typed(body: WorkflowCreate) -> Definition:
    """The body with its nodes typed; what does not fit a node is a 422 by location."""
    from pydantic import ValidationError

    try:
        return Definition.model_validate(body.model_dump(exclude_none=True))
    except ValidationError as exc:
        errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        raise Unprocessable(
            "the workflow's definition is not valid", code="validation_error", details=errors
        ) from None


def _validate(tenant_id: str, body: Definition) -> dict[str, Any]:
    """Everything a definition must satisfy, then its ASL."""
    checks.check(body.root)
    for node in walk(body.root):
        if isinstance(node, AgentNode):
            try:
                stores().agents.get(tenant_id, node.agent_id)
            except NotFound:
                raise checks.invalid(node.id, "agent_not_found", f"agent {node.agent_id} not found") from None
            if node.output_schema is not None:
                _check_schema(node.id, node.output_schema)
    if body.input_schema is not None:
        _check_schema("input_schema", body.input_schema)
    return compiler.compile_definition(body.root, function_arn=config.workflow_deploy().function_arn)


def _check_schema(where: str, schema: dict[str, Any]) -> None:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise Unprocessable(
            f"{where}: not a valid JSON Schema: {exc.message}",
            code="invalid_schema",
            details={"node_id": where},
        ) from None


def _deploy(workflow_id: str, version: int, definition: dict[str, Any]) -> str:
    """Create the version's state machine (validated first where the API can: moto has no
    ValidateStateMachineDefinition)."""
    sfn = aws.client("stepfunctions")
    text = json.dumps(definition)
    validate = getattr(sfn, "validate_state_machine_definition", None)
    if validate is not None:
        try:
            found = validate(definition=text, type="STANDARD")
        except Exception:  # noqa: BLE001 - an endpoint without the action: CreateStateMachine still checks
            found = {"result": "OK"}
        if found.get("result") == "FAIL":
            problems = [d.get("message") for d in found.get("diagnostics", [])]
            raise Unprocessable(
                "the compiled definition was refused",
                code="invalid_definition",
                details={"problems": problems},
            )
    try:
        created = sfn.create_state_machine(
            name=machine_name(workflow_id, version),
            definition=text,
            roleArn=config.workflow_deploy().role_arn,
            type="STANDARD",
            tags=[{"key": "project", "value": "stepwise"}, {"key": "workflow_id", "value": workflow_id}],
        )
    except sfn.exceptions.StateMachineAlreadyExists:
        return machine_arn(workflow_id, version)
    except Exception as exc:
        raise Unavailable("the workflow's state machine could not be created; try again") from exc
    return str(created["stateMachineArn"])


def _view(item: Any, version: int | None = None, data: dict[str, Any] | None = None) -> WorkflowView:
    head = dict(item.data)
    shown = data or head
    return WorkflowView(
        workflow_id=head["workflow_id"],
        name=shown["name"],
        description=shown.get("description"),
        input_schema=shown.get("input_schema"),
        root=shown["root"],
        version=version or head["version"],
        versions=head["version"],
        state_machine_arn=shown.get("state_machine_arn"),
        created_at=item.created_at,
        updated_at=item.updated_at or item.created_at,
    )


def _record(body: Definition, arn: str, definition: dict[str, Any]) -> dict[str, Any]:
    return {**body.model_dump(mode="json", exclude_none=True), "state_machine_arn": arn, "asl": definition}


def create(tenant_id: str, request: WorkflowCreate) -> WorkflowView:
    body = typed(request)
    definition = _validate(tenant_id, body)
    workflow_id, at = new_id("wfl"), utcnow()
    limit = config.quotas().max_workflows
    arn = _deploy(workflow_id, 1, definition)
    data = _record(body, arn, definition)
    head = {"workflow_id": workflow_id, "version": 1, **{k: v for k, v in data.items() if k != "asl"}}
    try:
        store.create(tenant_id, workflow_id, head, data, at, limit)
    except Exception:
        _undeploy(arn)
        raise
    item = store.head(tenant_id, workflow_id)
    assert item is not None
    return _view(item)


def publish(tenant_id: str, workflow_id: str, request: WorkflowCreate) -> WorkflowView:
    current = store.head(tenant_id, workflow_id)
    if current is None:
        raise not_found(workflow_id)
    body = typed(request)
    definition = _validate(tenant_id, body)
    number = int(current.data["version"]) + 1
    arn = _deploy(workflow_id, number, definition)
    data = _record(body, arn, definition)
    head = {"workflow_id": workflow_id, "version": number, **{k: v for k, v in data.items() if k != "asl"}}
    store.publish(tenant_id, workflow_id, head, number, data, utcnow())
    item = store.head(tenant_id, workflow_id)
    assert item is not None
    return _view(item)


def get(tenant_id: str, workflow_id: str, version: int | None = None) -> WorkflowView:
    item = store.head(tenant_id, workflow_id)
    if item is None:
        raise not_found(workflow_id)
    if version is None:
        return _view(item)
    return _view(item, version, version_data(tenant_id, workflow_id, version))


def version_data(tenant_id: str, workflow_id: str, version: int) -> dict[str, Any]:
    found = store.version(tenant_id, workflow_id, version)
    if found is None:
        raise NotFound(f"workflow {workflow_id} has no version {version}", code="version_not_found")
    return dict(found.data)


def list_workflows(tenant_id: str) -> WorkflowList:
    return WorkflowList(workflows=[_view(i) for i in store.heads(tenant_id)])


def versions(tenant_id: str, workflow_id: str) -> WorkflowVersions:
    if store.head(tenant_id, workflow_id) is None:
        raise not_found(workflow_id)
    found = [
        WorkflowVersion(
            version=int(i.sk.rsplit("#", 1)[-1]),
            state_machine_arn=i.data.get("state_machine_arn"),
            created_at=i.created_at,
        )
        for i in store.versions(tenant_id, workflow_id)
    ]
    return WorkflowVersions(workflow_id=workflow_id, versions=found)


def asl(tenant_id: str, workflow_id: str, version: int | None = None) -> WorkflowAsl:
    item = store.head(tenant_id, workflow_id)
    if item is None:
        raise not_found(workflow_id)
    number = version or int(item.data["version"])
    definition = version_data(tenant_id, workflow_id, number)["asl"]
    return WorkflowAsl(workflow_id=workflow_id, version=number, definition=definition)


def delete(tenant_id: str, workflow_id: str) -> None:
    if store.head(tenant_id, workflow_id) is None:
        raise not_found(workflow_id)
    arns = [i.data.get("state_machine_arn") for i in store.versions(tenant_id, workflow_id)]
    store.delete(tenant_id, workflow_id)
    for arn in arns:
        if arn:
            _undeploy(arn)


def _undeploy(arn: str) -> None:
    import contextlib

    with contextlib.suppress(Exception):  # a machine left behind costs nothing; its runs may still finish
        aws.client("stepfunctions").delete_state_machine(stateMachineArn=arn)


def declare_tool(tenant_id: str, tool: WorkflowTool) -> None:
    """A workflow tool as an agent declares it: its workflow must be the tenant's (another tenant's is
    as unknown as a made-up one: 422 naming the tool). What the declaration leaves out is the
    workflow's, at its latest version (or the tool's pinned one): the description (else its name),
    and the input_schema when it describes an object (the model's arguments are the workflow's input)."""
    from stepwise.tools.models import valid_input_schema

    try:
        found = get(tenant_id, tool.workflow_id, tool.version)
    except NotFound:
        raise Unprocessable(
            f"tool {tool.name}: workflow {tool.workflow_id} (version {tool.version or 'latest'}) not found",
            code="unknown_workflow",
            details={"tool": tool.name, "workflow_id": tool.workflow_id},
        ) from None
    if tool.description == tool.default_description(tool.workflow_id):
        tool.description = (found.description or f"Runs the workflow {found.name}.")[:4096]
    if "input_schema" not in tool.model_fields_set and found.input_schema:
        with contextlib.suppress(ValueError):
            tool.input_schema = valid_input_schema(dict(found.input_schema))

"""A workflow's definition as the API takes it: nodes of seven types, nested, each with an id unique in
the workflow. Checked here for shape; references between nodes are checked by stepwise.workflows.checks."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from stepwise.core import ids
from stepwise.core.schema import Strict, Timestamp
from stepwise.webhooks.models import WebhookConfig

NODE_ID = r"^[A-Za-z][A-Za-z0-9_]{0,63}$"  # a JSONPath member name as it stands: `$.nodes.<id>`
MAX_ITERATIONS = 50
MAX_NODES = 100
MAX_CONCURRENCY = 40
TEMPLATE_LIMIT = 20_000


class Retry(Strict):
    max_attempts: int = Field(ge=1, le=10, description="Attempts in all, the first included")
    backoff_rate: float = Field(default=2.0, ge=1.0, le=10.0)


class Condition(Strict):
    """`{path, equals | matches | exists}`: exactly one test on the value at `path`."""

    path: str = Field(
        min_length=1, max_length=500, description="`input.x`, `nodes.<id>.output.field`, `item`"
    )
    equals: str | int | float | bool | None = None
    matches: str | None = Field(
        default=None, max_length=500, description="A wildcard pattern: `*` is any text"
    )
    exists: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_test(cls, data: Any) -> Any:
        if isinstance(data, dict):
            tests = [k for k in ("equals", "matches", "exists") if k in data]
            if len(tests) != 1:
                raise ValueError("a condition takes exactly one of equals, matches, exists")
        return data

    @property
    def test(self) -> str:
        fields = self.model_fields_set & {"equals", "matches", "exists"}
        return next(iter(fields))


class NodeBase(Strict):
    id: str = Field(pattern=NODE_ID)
    timeout_seconds: int | None = Field(default=None, ge=1, le=7 * 24 * 3600)
    retry: Retry | None = None
    on_error: Literal["fail", "continue"] = "fail"


class AgentNode(NodeBase):
    type: Literal["agent"]
    agent_id: str = Field(pattern=ids.AGENT_ID)
    input: str = Field(
        min_length=1, max_length=TEMPLATE_LIMIT, description="A template: the child run's message"
    )
    output_schema: dict[str, Any] | None = None


class SequentialNode(NodeBase):
    type: Literal["sequential"]
    nodes: list[Node] = Field(min_length=1, max_length=MAX_NODES)


class ParallelNode(NodeBase):
    type: Literal["parallel"]
    branches: list[Node] = Field(min_length=1, max_length=MAX_CONCURRENCY)
    max_concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)


class MapNode(NodeBase):
    type: Literal["map"]
    over: str = Field(min_length=1, max_length=500, description="A path to a list")
    node: Node
    max_concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)


class LoopNode(NodeBase):
    type: Literal["loop"]
    node: Node
    until: Condition
    max_iterations: int = Field(ge=1, le=MAX_ITERATIONS)


class BranchNode(NodeBase):
    type: Literal["branch"]
    on: str = Field(min_length=1, max_length=500)
    cases: dict[str, Node] = Field(min_length=1, max_length=MAX_CONCURRENCY)
    default: Node | None = None


class Approvers(Strict):
    email: list[str] | None = Field(default=None, max_length=20)
    slack: str | None = Field(default=None, max_length=2000, description="A Slack incoming-webhook URL")


class ApprovalNode(NodeBase):
    type: Literal["approval"]
    prompt: str = Field(min_length=1, max_length=TEMPLATE_LIMIT)
    approvers: Approvers | None = None


Node = Annotated[
    AgentNode | SequentialNode | ParallelNode | MapNode | LoopNode | BranchNode | ApprovalNode,
    Field(discriminator="type"),
]
LEAVES = (AgentNode, ApprovalNode)
for _model in (SequentialNode, ParallelNode, MapNode, LoopNode, BranchNode):
    _model.model_rebuild()


def children(node: BaseModel) -> list[Any]:
    """The nodes directly inside `node`, in order."""
    if isinstance(node, SequentialNode):
        return list(node.nodes)
    if isinstance(node, ParallelNode):
        return list(node.branches)
    if isinstance(node, MapNode | LoopNode):
        return [node.node]
    if isinstance(node, BranchNode):
        return [*node.cases.values(), *([node.default] if node.default else [])]
    return []


def walk(node: Any) -> list[Any]:
    """Every node of the tree, depth first, `node` first."""
    found = [node]
    for child in children(node):
        found.extend(walk(child))
    return found


class Definition(Strict):
    """A workflow's definition with its nodes typed (what WorkflowCreate's `root` must validate as)."""

    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    input_schema: dict[str, Any] | None = None
    root: Node


class WorkflowCreate(Strict):
    """`POST /v1/workflows` and `PUT /v1/workflows/{id}`. `root` is checked as a node tree (a 422
    `validation_error` lists what is wrong, by location): typed in Definition, an object here so the
    spec keeps one schema for the body (the node types are in the README and DESIGN.md)."""

    name: str = Field(min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=2000)
    input_schema: dict[str, Any] | None = None
    root: dict[str, Any] = Field(
        description="A node: {id, type: agent | sequential | parallel | map | loop | branch | approval, ...}"
    )


class WorkflowRunCreate(Strict):
    input: dict[str, Any] = Field(default_factory=dict)
    version: int | None = Field(default=None, ge=1)
    user_id: str | None = Field(default=None, pattern=ids.USER_ID)
    webhook: WebhookConfig | None = None


class WorkflowView(BaseModel):
    """A workflow at its latest version (or the one asked for)."""

    workflow_id: str
    name: str
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    root: dict[str, Any]
    version: int
    versions: int
    state_machine_arn: str | None = None
    created_at: Timestamp
    updated_at: Timestamp


class WorkflowList(BaseModel):
    workflows: list[WorkflowView]


class WorkflowVersion(BaseModel):
    version: int
    state_machine_arn: str | None = None
    created_at: Timestamp


class WorkflowVersions(BaseModel):
    workflow_id: str
    versions: list[WorkflowVersion]


class WorkflowAsl(BaseModel):
    """`GET /v1/workflows/{id}/asl`: the Amazon States Language a version runs as."""

    workflow_id: str
    version: int
    definition: dict[str, Any]


class WorkflowRunAccepted(BaseModel):
    run_id: str
    workflow_id: str
    version: int
    status: str

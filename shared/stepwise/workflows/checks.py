"""What a definition must satisfy beyond its shape, checked when it is created or published (a 422
naming the node): ids unique; every path in the language; every node a path names exists, is not the
node itself or one that contains it (a cycle of references), and has run by the time the path is read.

What has run, where: inside a sequential, the nodes before; after a sequential or a loop, everything in
it; after a parallel, a map or a branch, only that node's own output (a branch's cases may not have run;
a parallel's branches and a map's iterations keep their own data). Inside a loop's body, the body's own
nodes count as run (from the second iteration on they have; on the first, a template gets ""): that is how
a writer reads its critic. `item` exists only inside a map."""

from __future__ import annotations

from typing import Any

from stepwise.core.errors import Unprocessable
from stepwise.workflows import expressions
from stepwise.workflows.models import (
    AgentNode,
    ApprovalNode,
    BranchNode,
    LoopNode,
    MapNode,
    ParallelNode,
    SequentialNode,
    walk,
)


def invalid(node_id: str, problem: str, message: str) -> Unprocessable:
    return Unprocessable(
        f"node {node_id!r}: {message}", code=problem, details={"node_id": node_id, "problem": problem}
    )


def done_after(node: Any) -> set[str]:
    """The nodes whose output the workflow's data holds once `node` has run."""
    if isinstance(node, SequentialNode):
        return {node.id}.union(*(done_after(n) for n in node.nodes))
    if isinstance(node, LoopNode):
        return {node.id} | done_after(node.node)
    return {node.id}


def aliases(root: Any) -> dict[str, str]:
    """A sequential's output is its last node's, a loop's its body's last output: the node whose entry
    in the data holds a node's output (no state copies it)."""
    found: dict[str, str] = {}

    def target(node: Any) -> str:
        if isinstance(node, SequentialNode):
            return target(node.nodes[-1])
        if isinstance(node, LoopNode):
            return target(node.node)
        return str(node.id)

    for node in walk(root):
        found[node.id] = target(node)
    return found


def check(root: Any) -> None:
    nodes = walk(root)
    seen: set[str] = set()
    for node in nodes:
        if node.id in seen:
            raise invalid(node.id, "duplicate_node_id", "another node has this id")
        seen.add(node.id)
    _check(root, available=set(), ancestors=[], in_map=False, known=seen)


def _paths(node: Any) -> list[tuple[str, str]]:
    """(what, text) of every path or template the node itself holds."""
    if isinstance(node, AgentNode):
        return [("input", node.input)]
    if isinstance(node, ApprovalNode):
        return [("prompt", node.prompt)]
    return []


def _refer(
    node_id: str,
    path: expressions.Path,
    available: set[str],
    ancestors: list[str],
    in_map: bool,
    known: set[str],
) -> None:
    if path.root == "item" and not in_map:
        raise invalid(node_id, "item_outside_map", "`item` is only defined inside a map")
    if path.root != "nodes":
        return
    target = str(path.node)
    if target not in known:
        raise invalid(node_id, "unknown_node", f"refers to node {target!r}, which the workflow does not have")
    if target == node_id or target in ancestors:
        raise invalid(node_id, "reference_cycle", f"refers to {target!r}, whose output depends on this node")
    if target not in available:
        raise invalid(
            node_id, "node_not_run_yet", f"refers to node {target!r}, which cannot have run before it"
        )


def _parse(node_id: str, text: str, template: bool) -> list[expressions.Path]:
    try:
        return expressions.template_paths(text) if template else [expressions.parse(text)]
    except expressions.BadPath as exc:
        raise invalid(node_id, "invalid_path", str(exc)) from None


def _check(node: Any, *, available: set[str], ancestors: list[str], in_map: bool, known: set[str]) -> None:
    refer = lambda path, avail=available: _refer(node.id, path, avail, ancestors, in_map, known)  # noqa: E731
    for _, text in _paths(node):
        for path in _parse(node.id, text, template=True):
            refer(path)
    inner = [*ancestors, node.id]
    if isinstance(node, SequentialNode):
        seen = set(available)
        for child in node.nodes:
            _check(child, available=seen, ancestors=inner, in_map=in_map, known=known)
            seen = seen | done_after(child)
    elif isinstance(node, ParallelNode):
        for child in node.branches:
            _check(child, available=available, ancestors=inner, in_map=in_map, known=known)
    elif isinstance(node, MapNode):
        for path in _parse(node.id, node.over, template=False):
            refer(path)
        _check(node.node, available=available, ancestors=inner, in_map=True, known=known)
    elif isinstance(node, LoopNode):
        body = available | done_after(node.node)
        # The body reads its own nodes from the iteration before: not a cycle, they ran.
        _check(node.node, available=body, ancestors=inner, in_map=in_map, known=known)
        for path in _parse(node.id, node.until.path, template=False):
            _refer(node.id, path, body, ancestors, in_map, known)
    elif isinstance(node, BranchNode):
        for path in _parse(node.id, node.on, template=False):
            refer(path)
        for child in [*node.cases.values(), *([node.default] if node.default else [])]:
            _check(child, available=available, ancestors=inner, in_map=in_map, known=known)

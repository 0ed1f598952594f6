"""The modules of stepwise import one another in a DAG: no cycle, lazy imports inside functions
included (a lazy import only hides a cycle until the day it is made eager)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "shared"


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """What `name` imports of stepwise, anywhere in its body. `from package import submodule` is an
    edge to the submodule only: a package's own __init__ is loaded with any of its modules anyway."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            submodules = {f"{base}.{alias.name}" for alias in node.names} & set(known)
            out |= submodules
            if len(submodules) < len(node.names) and base in known:
                out.add(base)
    out.discard(name)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}

    assert cycles(graph) == []


def test_a_cycle_is_found_through_a_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

    assert cycles(graph) == [["a", "b", "c"]]

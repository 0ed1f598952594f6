"""The modules of stepwise import one another in a DAG: no cycle, lazy imports inside functions
included (a lazy import only hides a cycle until the day it is made eager). Between its packages
(stepwise.<package>, or a top-level module) no two import each other, and what ships to Lambda
imports nothing of what runs on a developer's machine only (dev/: the local stack, the CLI)."""

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


def package(module: str, known: dict[str, Path]) -> str:
    """`stepwise.<package>` for a module inside a package, the module itself at the top."""
    parts = module.split(".")
    top = ".".join(parts[:2])
    return top if len(parts) > 1 and known.get(top, Path()).name == "__init__.py" else module


def package_edges(known: dict[str, Path]) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """(package, package) -> the module imports that make the first depend on the second."""
    edges: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for name, path in known.items():
        for target in imports(name, path, known):
            pair = (package(name, known), package(target, known))
            if pair[0] != pair[1]:
                edges.setdefault(pair, set()).add((name, target))
    return edges


def two_way(edges: dict[tuple[str, str], set[tuple[str, str]]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, b in edges if a < b and (b, a) in edges)


def test_no_two_packages_import_each_other() -> None:
    edges = package_edges(modules())

    found = {pair: sorted(edges[pair] | edges[pair[::-1]]) for pair in two_way(edges)}

    assert found == {}


def test_a_two_way_pair_of_packages_is_found() -> None:
    edges = {("a", "b"): {("a.x", "b.y")}, ("b", "a"): {("b.z", "a.w")}, ("a", "c"): {("a.x", "c")}}

    assert two_way(edges) == [("a", "b")]


def test_a_module_is_its_package_s_or_its_own() -> None:
    known = {"stepwise.loop": Path("loop/__init__.py"), "stepwise.loop.step": Path("loop/step.py")}
    known |= {"stepwise.tools.builtin.catalog": Path("tools/builtin/catalog.py"), "stepwise.x": Path("x.py")}
    known |= {"stepwise.tools": Path("tools/__init__.py")}

    assert package("stepwise.loop.step", known) == "stepwise.loop"
    assert package("stepwise.tools.builtin.catalog", known) == "stepwise.tools"
    assert package("stepwise.x", known) == "stepwise.x"


def test_what_ships_imports_nothing_of_the_developer_s_machine() -> None:
    """A shipped module importing the local stack, the CLI or the tests would fail in Lambda, where
    only shared/ is deployed."""
    dev = {"stepwise_local", "stepwise_cli", "tests", "bench"}
    found = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            found += [(name, n) for n in names if n.split(".")[0] in dev]

    assert found == []


def test_a_cycle_is_found_through_a_lazy_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

    assert cycles(graph) == [["a", "b", "c"]]

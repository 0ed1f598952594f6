"""Reachability over stepwise's code, from one handler module, by name (see dynamodb_access).

A definition (function, class, method, module-level assignment) is reached when reached code names
it: `module.name`, `from module import name`, a lazy import inside a function alike. Module-level
statements and decorated definitions (routes, validators) run when their module is imported. A
reached class's methods are reached by the attribute names reached code uses on values (dunders, and
every method of a class with a base that is not ours, are reached with the class). A module used as a
value escapes: into a slot annotated with a Protocol (the loop's `Stores`, a `MemoryStore` port) its
functions are reached by that Protocol's receivers only; anywhere else, by any attribute name.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT / "shared"

# The one function that imports stepwise modules by name at run time (the builtin tools), and the
# names of the modules it may return (its BUILTINS and IMPLIED). What a caller does with the module it
# returns is followed at the call: `load(name).run`, `getattr(load(name), "X")`, `module = load(name)`
# then `module.run`; anything else makes every such module escape.
LOADER = ("stepwise.tools.builtin.catalog", "load")
# The API's routes table loads its modules by name (stepwise.api.routing): the modules that import
# reaches are the ones the table names.
ROUTES_LOADER = "stepwise.api.routing"


@cache
def route_modules() -> tuple[str, ...]:
    table = importlib.import_module("stepwise.api.app")
    return tuple(f"stepwise.api.{line.module}" for line in table.ROUTES)


@cache
def loadable() -> tuple[str, ...]:
    catalog = importlib.import_module(LOADER[0])
    return tuple(sorted({*catalog.BUILTINS.values(), *catalog.IMPLIED.values()}))


PURE_DECORATORS = {"cache", "lru_cache", "cached_property", "property", "staticmethod", "classmethod"}
PURE_DECORATORS |= {"dataclass", "contextmanager", "asynccontextmanager", "override", "wraps", "overload"}


def module_name(path: Path) -> str:
    if path.is_relative_to(SHARED):
        parts = path.relative_to(SHARED).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return "functions." + path.parent.name  # a handler module


@cache
def all_modules() -> dict[str, Path]:
    found = {module_name(p): p for p in SHARED.rglob("*.py")}
    found |= {module_name(p): p for p in (ROOT / "functions").glob("*/app.py")}
    return found


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    defs: dict[str, ast.AST] = field(default_factory=dict)  # top-level functions, classes, assignments
    aliases: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # name -> (module, attr)
    imports_at_load: set[str] = field(default_factory=set)
    talks_pynamodb: bool = False


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]
    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*anchor, *([node.module] if node.module else [])])


@cache
def load(name: str) -> Module:
    path = all_modules()[name]
    module = Module(name, path, ast.parse(path.read_text()))
    known = all_modules()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    module.aliases[alias.asname] = (alias.name, None)
                else:
                    module.aliases[alias.name.split(".")[0]] = (alias.name.split(".")[0], None)
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = _absolute(module, node)
            targets = []
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                module.aliases[alias.asname or alias.name] = (
                    (sub, None) if sub in known else (base, alias.name)
                )
                targets.append(sub if sub in known else base)
            module.talks_pynamodb |= base.startswith("pynamodb")
        else:
            continue
        if node in module.tree.body:
            module.imports_at_load |= {t for t in targets if t in known}
    for node in module.tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            module.defs[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        module.defs[name.id] = node
    return module


Item = tuple[str, str]  # (module, top-level name) or (module, "Class.method")


@dataclass
class Reach:
    """The fixpoint of reachability from one handler module."""

    items: set[Item] = field(default_factory=set)
    loaded: set[str] = field(default_factory=set)
    # Attribute names reached code uses: on any value, or only on our classes (and their instances).
    attributes: set[str] = field(default_factory=set)
    method_attributes: set[str] = field(default_factory=set)
    functions: dict[str, set[Item]] = field(default_factory=dict)  # by name: escaped modules' definitions
    methods: dict[str, set[Item]] = field(default_factory=dict)  # by name: reached classes' methods
    # Modules that went into a slot typed by a Protocol (a port): reachable only through a receiver of
    # that type, by (protocol, name).
    ported: dict[tuple[str, str], set[Item]] = field(default_factory=dict)
    typed_attributes: set[tuple[str, str]] = field(default_factory=set)
    escaped: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    todo: list[Item] = field(default_factory=list)
    why: dict[Item, str] = field(default_factory=dict)  # what reached each item first, to explain a need
    current: str = ""

    def reach(self, item: Item, why: str = "") -> None:
        if item not in self.items:
            self.items.add(item)
            self.why[item] = why or self.current
            self.todo.append(item)

    def attribute(self, name: str, methods_only: bool = False) -> None:
        if name not in self.method_attributes:
            self.method_attributes.add(name)
            for item in self.methods.get(name, ()):
                self.reach(item, f"{self.current} uses .{name}")
        if not methods_only and name not in self.attributes:
            self.attributes.add(name)
            for item in self.functions.get(name, ()):
                self.reach(item, f"{self.current} uses .{name}")

    def typed_attribute(self, name: str, protocols: set[str]) -> None:
        """`.name` on a receiver whose annotated type is one of `protocols`."""
        self.attribute(name, methods_only=True)  # a class implementing the protocol
        for protocol in protocols:
            if (protocol, name) not in self.typed_attributes:
                self.typed_attributes.add((protocol, name))
                for item in self.ported.get((protocol, name), ()):
                    self.reach(item, f"{self.current} uses .{name} of a {protocol}")
        for item in self.functions.get(name, ()):  # a module that escaped untyped may be there too
            self.reach(item, f"{self.current} uses .{name}")

    def port(self, protocol: str, name: str, item: Item) -> None:
        self.ported.setdefault((protocol, name), set()).add(item)
        if (protocol, name) in self.typed_attributes:
            self.reach(item, f".{name} of a {protocol} on {item[0]}")

    def candidate(self, name: str, item: Item, method: bool) -> None:
        (self.methods if method else self.functions).setdefault(name, set()).add(item)
        if name in (self.method_attributes if method else self.attributes):
            self.reach(item, f".{name} (used somewhere) on {item[0]}")


def _decorator_name(node: ast.expr) -> str:
    while isinstance(node, ast.Call):
        node = node.func
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _registers(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any(_decorator_name(d) not in PURE_DECORATORS for d in decorators)


def node_of(item: Item) -> ast.AST:
    module, name = item
    owner, _, method = name.partition(".")
    node = load(module).defs[owner]
    if method:
        assert isinstance(node, ast.ClassDef)
        return next(
            n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == method
        )
    return node


def _chain(node: ast.Attribute) -> tuple[ast.expr, list[str]]:
    attrs: list[str] = []
    current: ast.expr = node
    while isinstance(current, ast.Attribute):
        attrs.append(current.attr)
        current = current.value
    return current, attrs[::-1]


@cache
def protocols() -> set[str]:
    """Every Protocol class of stepwise, as "module.Class"."""
    found = set()
    for name in all_modules():
        module = load(name)
        for def_name, node in module.defs.items():
            if isinstance(node, ast.ClassDef) and any(
                module.aliases.get(b.id) == ("typing", "Protocol")
                for b in node.bases
                if isinstance(b, ast.Name)
            ):
                found.add(f"{name}.{def_name}")
    return found


def named_protocols(module: Module, annotation: ast.expr | None) -> set[str]:
    """The Protocols an annotation names (`P`, `P | None`, "P"), resolved in `module`'s scope."""
    if annotation is None:
        return set()
    found = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            with contextlib.suppress(SyntaxError):  # a docstring-like constant, not an annotation
                found |= named_protocols(module, ast.parse(node.value, mode="eval").body)
        qualified = None
        if isinstance(node, ast.Name):
            if node.id in module.defs:
                qualified = f"{module.name}.{node.id}"
            elif node.id in module.aliases:
                imported, attr = module.aliases[node.id]
                qualified = f"{imported}.{attr}" if attr else None
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            imported, attr = module.aliases.get(node.value.id, ("", None))
            qualified = f"{imported}.{node.attr}" if imported and not attr else None
        if qualified in protocols():
            found.add(qualified)
    return found


@cache
def field_protocols() -> dict[str, set[str]]:
    """Attribute name -> the Protocols that class fields of that name are annotated with (the loop's
    `Stores.runs: RunStore`), so `stores().runs` is typed."""
    found: dict[str, set[str]] = {}
    for name in all_modules():
        module = load(name)
        for node in module.defs.values():
            if isinstance(node, ast.ClassDef):
                for child in node.body:
                    if isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
                        typed = named_protocols(module, child.annotation)
                        if typed:
                            found.setdefault(child.target.id, set()).update(typed)
    return found


class Walker:
    """Reaches what one definition names."""

    def __init__(self, reach: Reach, module: Module) -> None:
        self.reach = reach
        self.module = module
        self.loaded_vars: set[str] = set()  # local names bound to a module the loader returned
        self.followed: set[int] = set()  # loader calls whose result's use is followed
        self.locals: set[str] = set()  # names bound in the definition (they shadow module names)
        self.local_types: dict[str, set[str]] = {}  # local name -> the Protocols it is annotated with
        self.slots: dict[int, set[str]] = {}  # id of an expression -> the Protocols of the slot it fills

    def types(self, node: ast.expr) -> set[str]:
        """The Protocols an expression is known (from annotations) to be."""
        if isinstance(node, ast.Name):
            return self.local_types.get(node.id, set()) if node.id in self.locals else set()
        if isinstance(node, ast.BoolOp):
            return set().union(*(self.types(v) for v in node.values))
        if isinstance(node, ast.IfExp):
            return self.types(node.body) | self.types(node.orelse)
        if isinstance(node, ast.Attribute):
            return field_protocols().get(node.attr, set())
        if isinstance(node, ast.Call):
            target = self.definition(node.func)
            if target and isinstance(target[1], ast.FunctionDef | ast.AsyncFunctionDef):
                return named_protocols(target[0], target[1].returns)
        return set()

    def definition(self, func: ast.expr) -> tuple[Module, ast.AST] | None:
        """The stepwise definition a callee names, if it names one directly."""
        qualified = self.qualified(func)
        if qualified and qualified[0] in all_modules():
            module = load(qualified[0])
            if qualified[1] in module.defs:
                return module, module.defs[qualified[1]]
        return None

    def scope(self, root: ast.AST) -> None:
        """The definition's local names, their annotated Protocols, and the typed slots values fill."""
        functions = [
            n for n in ast.walk(root) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        ]
        for function in functions:
            arguments = function.args
            for arg in [
                *arguments.posonlyargs,
                *arguments.args,
                *arguments.kwonlyargs,
                arguments.vararg,
                arguments.kwarg,
            ]:
                if arg is not None:
                    self.locals.add(arg.arg)
                    self.local_types.setdefault(arg.arg, set()).update(
                        named_protocols(self.module, arg.annotation)
                    )
            if not isinstance(function, ast.Lambda):
                returns = named_protocols(self.module, function.returns)
                for node in ast.walk(function):
                    if returns and isinstance(node, ast.Return) and node.value is not None:
                        self.slots[id(node.value)] = returns
        for node in ast.walk(root):
            if isinstance(
                node, ast.Assign | ast.AnnAssign | ast.For | ast.AsyncFor | ast.comprehension | ast.NamedExpr
            ):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self.locals |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                self.locals |= {n.id for n in ast.walk(node.optional_vars) if isinstance(n, ast.Name)}
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self.locals.add(node.name)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                typed = named_protocols(self.module, node.annotation)
                self.local_types.setdefault(node.target.id, set()).update(typed)
                if node.value is not None and typed:
                    self.slots[id(node.value)] = typed
            if isinstance(node, ast.Call):
                target = self.definition(node.func)
                if target and isinstance(target[1], ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    slots = self.parameter_protocols(*target)
                    for keyword in node.keywords:
                        if keyword.arg in slots:
                            self.slots[id(keyword.value)] = slots[keyword.arg]
        if isinstance(root, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            pass
        changed = True
        while changed:  # a local assigned a typed value is typed too
            changed = False
            for node in ast.walk(root):
                if isinstance(node, ast.Assign):
                    typed = self.types(node.value) | self.slots.get(id(node.value), set())
                    for name in (n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)):
                        if typed - self.local_types.get(name, set()):
                            self.local_types.setdefault(name, set()).update(typed)
                            changed = True

    @staticmethod
    def parameter_protocols(module: Module, node: ast.AST) -> dict[str, set[str]]:
        """Keyword -> Protocols, for a function's parameters or a (data)class's fields."""
        if isinstance(node, ast.ClassDef):
            return {
                c.target.id: named_protocols(module, c.annotation)
                for c in node.body
                if isinstance(c, ast.AnnAssign) and isinstance(c.target, ast.Name)
            }
        assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        return {a.arg: named_protocols(module, a.annotation) for a in arguments}

    def qualified(self, func: ast.expr) -> tuple[str, str] | None:
        """(module, name) that a callee names, through aliases and `module.name` chains."""
        if isinstance(func, ast.Name):
            if func.id in self.module.defs:
                return self.module.name, func.id
            imported, attr = self.module.aliases.get(func.id, ("", None))
            return (imported, attr) if attr else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            imported, attr = self.module.aliases.get(func.value.id, ("", None))
            return (f"{imported}.{attr}" if attr else imported, func.attr) if imported else None
        return None

    def is_loader(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and self.qualified(node.func) == LOADER

    def loaded_attribute(self, name: str) -> None:
        for target in loadable():
            self.load_module(target)
            if name in load(target).defs:
                self.reach.reach((target, name))

    def follow_loader(self, root: ast.AST) -> None:
        """Mark the loader calls whose result is only read for attributes, and the names bound to one."""
        for node in ast.walk(root):
            if isinstance(node, ast.Assign) and self.is_loader(node.value):
                if all(isinstance(t, ast.Name) for t in node.targets):
                    self.loaded_vars |= {t.id for t in node.targets if isinstance(t, ast.Name)}
                    self.followed.add(id(node.value))
            elif isinstance(node, ast.Attribute) and self.is_loader(node.value):
                self.followed.add(id(node.value))
            elif isinstance(node, ast.Expr) and self.is_loader(node.value):
                self.followed.add(id(node.value))  # called for its check, the module dropped
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and node.args
                and self.is_loader(node.args[0])
            ):
                self.followed.add(id(node.args[0]))

    def load_module(self, name: str) -> None:
        """A module and what importing it runs: its packages, its module-level imports and statements."""
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in all_modules() and prefix not in self.reach.loaded:
                self.reach.loaded.add(prefix)
                module = load(prefix)
                for node in module.tree.body:
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        if _registers(node):  # a route or a validator: registered as the module loads
                            self.reach.reach((prefix, node.name))
                    elif isinstance(node, ast.Assign | ast.AnnAssign):
                        for target in [t for t, n in module.defs.items() if n is node]:
                            self.reach.reach((prefix, target))
                    elif not isinstance(node, ast.Import | ast.ImportFrom):
                        Walker(self.reach, module).visit(node)
                for imported in module.imports_at_load:
                    self.load_module(imported)

    def escape(self, name: str, slot: set[str] | None = None) -> None:
        """A module used as a value: any attribute name reached code uses may be one of its functions;
        in a slot typed by Protocols, only those it is used through as one of them."""
        self.load_module(name)
        if slot:
            for protocol in slot:
                for def_name, node in load(name).defs.items():
                    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        self.reach.port(protocol, def_name, (name, def_name))
            return
        if name in self.reach.escaped:
            return
        self.reach.escaped.add(name)
        self.reach.why[(name, "")] = self.reach.current
        for def_name, node in load(name).defs.items():
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.reach.candidate(def_name, (name, def_name), method=False)

    def resolve(self, module: str, name: str, rest: list[str], slot: set[str] | None = None) -> None:
        """`module.name.rest...` as reached code names it."""
        sub = f"{module}.{name}"
        if sub in all_modules():
            self.load_module(sub)
            if rest:
                self.resolve(sub, rest[0], rest[1:], slot)
            else:
                self.escape(sub, slot)
            return
        if module not in all_modules():
            return  # a third-party name: what follows it is the library's, not ours
        self.load_module(module)
        target = load(module)
        if name in target.defs:
            self.reach.reach((module, name))
            self.after_definition(target, name, rest)
        elif name in target.aliases:
            self.resolve_alias(target, name, rest, slot)
        else:
            for attr in rest:
                self.reach.attribute(attr)

    def after_definition(self, module: Module, name: str, rest: list[str]) -> None:
        """`Class.attr...` or `function.attr`: a method of one of our classes (an assignment's value is
        any value, so what follows it may be anything)."""
        methods_only = isinstance(module.defs[name], ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for attr in rest:
            self.reach.attribute(attr, methods_only)

    def resolve_alias(self, module: Module, name: str, rest: list[str], slot: set[str] | None = None) -> None:
        imported, attr = module.aliases[name]
        if attr is None:
            if imported in all_modules():
                if rest:
                    self.resolve(imported, rest[0], rest[1:], slot)
                else:
                    self.escape(imported, slot)
        else:
            self.resolve(imported, attr, rest, slot)

    def name(self, identifier: str, rest: list[str], slot: set[str] | None = None) -> None:
        if identifier in self.locals:
            return  # a local value; the attributes used on it are handled by visit
        if identifier in self.module.defs:
            self.reach.reach((self.module.name, identifier))
            self.after_definition(self.module, identifier, rest)
        elif identifier in self.module.aliases:
            self.resolve_alias(self.module, identifier, rest, slot)

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Attribute):
            base, attrs = _chain(node)
            if (isinstance(base, ast.Name) and base.id in self.loaded_vars) or self.is_loader(base):
                self.loaded_attribute(attrs[0])
                for attr in attrs[1:]:
                    self.reach.attribute(attr)
                if not isinstance(base, ast.Name):
                    self.visit(base)
                return
            if isinstance(base, ast.Name) and base.id not in self.locals:
                self.name(base.id, attrs)
                return
            # An attribute of a value: typed by its annotations when they name a Protocol.
            typed = self.types(node.value)
            if typed:
                self.reach.typed_attribute(node.attr, typed)
            else:
                self.reach.attribute(node.attr)
            self.visit(node.value)
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):  # a name bound here (a field, a target) is no reference
                self.name(node.id, [], self.slots.get(id(node)))
            return
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            if self.is_loader(node.args[0]):
                self.loaded_attribute(node.args[1].value)
            else:
                self.reach.attribute(node.args[1].value)
        if self.is_loader(node) and id(node) not in self.followed:
            for target in loadable():  # the module goes somewhere this does not follow
                self.escape(target)
        if isinstance(node, ast.Call) and self.qualified(node.func) == ("importlib", "import_module"):
            [name] = node.args[:1] or [None]
            if isinstance(name, ast.Constant) and str(name.value).startswith("stepwise"):
                self.escape(str(name.value))
            elif self.module.name == ROUTES_LOADER:
                for target in route_modules():
                    self.escape(target)
            elif not (isinstance(name, ast.Constant) or self.module.name == LOADER[0]):
                self.reach.problems.append(
                    f"{self.reach.current}: a stepwise module imported by a computed name"
                )
        for child in ast.iter_child_nodes(node):
            self.visit(child)

    def ours(self, base: ast.expr) -> bool:
        """Whether a base class is one of stepwise's (or Protocol/Generic/object, which call nothing)."""
        root = base.value if isinstance(base, ast.Subscript) else base
        if isinstance(root, ast.Name):
            if root.id in self.module.defs or root.id in (
                "object",
                "Exception",
                "ValueError",
                "RuntimeError",
            ):
                return True
            imported, attr = self.module.aliases.get(root.id, ("", None))
            if imported == "typing" and attr in ("Protocol", "Generic", "NamedTuple", "TypedDict"):
                return True
            return f"{imported}.{attr}" in all_modules() or imported in all_modules()
        return False

    def visit_definition(self, item: Item) -> None:
        node = node_of(item)
        if isinstance(node, ast.ClassDef):
            for child in [*node.decorator_list, *node.bases, *node.keywords]:
                self.visit(child)
            # A library calls the methods its base class declares (a Formatter's format, a transport's
            # handle_request): a class with a base that is not ours has all its methods reached.
            foreign = any(not self.ours(base) for base in node.bases)
            for child in node.body:
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    method = (item[0], f"{node.name}.{child.name}")
                    dunder = child.name.startswith("__") and child.name.endswith("__")
                    if foreign or dunder or _registers(child):
                        self.reach.reach(method)
                    else:
                        self.reach.candidate(child.name, method, method=True)
                else:
                    self.visit(child)
            return
        self.follow_loader(node)
        self.scope(node)
        self.visit(node)


def reach_from(handler: str) -> Reach:
    """Everything the handler module `functions.<role>` can reach."""
    reach = Reach()
    Walker(reach, load(handler)).load_module(handler)
    for name in load(handler).defs:
        reach.reach((handler, name))
    while reach.todo:
        item = reach.todo.pop()
        reach.current = f"{item[0]}:{item[1]}"
        module = load(item[0])
        Walker(reach, module).visit_definition(item)
    return reach

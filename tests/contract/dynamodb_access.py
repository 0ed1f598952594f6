"""What each function of template.yaml does to DynamoDB, derived from its code.

moto does not enforce IAM, so a missing grant would only show as AccessDenied in AWS and an extra one
never shows at all. This reads the code instead of trusting the template:

1. Reachability, from the function's handler module: the definitions (functions, classes, methods)
   that its code can reach by name. `module.name` and `from module import name` reach that
   definition; a module used as a value (the loop's `Stores` holds store modules) makes each of its
   functions reachable by any attribute name that reached code uses (`stores().runs.get(...)` reaches
   every escaped module's `get`); a reached class's methods are reachable the same way, by name.
   Decorated definitions (routes, validators) and module-level statements run when their module is
   imported, so they are reached with it. Lazy imports inside functions count like any other.
2. Operations, in every reached definition: pynamodb calls are found by what their receiver is (a
   model class, one of its indexes, an item of it, a TransactWrite or a model's batch_write) and
   mapped to the IAM actions the wire operations need. A receiver this cannot resolve in a module
   that talks to DynamoDB is an error to resolve in UNRESOLVED, so nothing is silently skipped.
3. Other DynamoDB clients (Powertools' idempotency persistence layer) are declared in EXTERNAL,
   with the actions checked against the library's own source.

The result is per function: {(table logical id, "table" | "index", action)}.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from pynamodb.attributes import Attribute
from pynamodb.indexes import Index
from pynamodb.models import Model

from tests.contract.reachability import ROOT, Item, Module, Reach, load, node_of, reach_from

Need = tuple[str, str, str]  # (table logical id, "table" | "index", "dynamodb:Action")

# pynamodb 6 builds a table's metadata from the model class and never calls DescribeTable for item
# operations (tests/integration/test_dynamodb_wire.py records the wire operations of each of these).
CLASS_OPS = {
    "get": "GetItem",
    "query": "Query",
    "scan": "Scan",
    "count": "Query",  # with a hash key; without one it is DescribeTable's ItemCount
    "batch_get": "BatchGetItem",
    "exists": "DescribeTable",
    "describe_table": "DescribeTable",
}
INDEX_OPS = {"query": "Query", "scan": "Scan", "count": "Query"}
ITEM_OPS = {"save": "PutItem", "update": "UpdateItem", "delete": "DeleteItem", "refresh": "GetItem"}
# Inside TransactWriteItems (and TransactGetItems) each item needs the action of its own kind: there is
# no IAM action for the transaction itself.
TX_OPS = {
    "save": "PutItem",
    "update": "UpdateItem",
    "delete": "DeleteItem",
    "condition_check": "ConditionCheckItem",
    "get": "GetItem",
}
BATCH_OPS = {"save": "BatchWriteItem", "delete": "BatchWriteItem"}
# Method names that are pynamodb's alone (dicts and sets have update, delete-like and get methods): on
# a receiver this cannot resolve, in a module that imports pynamodb, they are an error.
PYNAMODB_ONLY = {"save", "refresh", "batch_get", "batch_write", "condition_check", "scan", "count", "exists"}
AMBIGUOUS = {"update", "delete"}

# Receivers the inference cannot type, each resolved by hand: (module, definition, receiver source,
# method) -> the model class it is, or None when it is not pynamodb at all.
UNRESOLVED: dict[tuple[str, str, str, str], str | None] = {
    # the usage counters' module, handed the transaction (its own calls are derived where they are)
    ("stepwise.store.run_context", "save", "counters", "count"): None,
    # The circuit's item as read, or a new one when none is stored yet (stepwise.usage.circuits).
    ("stepwise.usage.circuits", "_enqueue", "item", "update"): "CircuitItem",
    # A message written with the context, in its transaction (stepwise.store.sessions.message_item).
    (
        "stepwise.store.run_context",
        "save",
        "sessions.message_item(tenant_id, m.session_id, m.run_id, m.step, m.slot, m.message)",
        "save",
    ): "SessionItem",
}

# DynamoDB clients that are not pynamodb: the name whose reference means the client is used, and what
# it does. The table comes from the call's `table_name=config.tables().<field>`.
EXTERNAL = {
    "aws_lambda_powertools.utilities.idempotency.DynamoDBPersistenceLayer": {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
    },
}

# Definitions that use a plain boto3 DynamoDB client, declared by hand: (module, definition) -> the
# (config.tables() field, action) pairs they need. Only for what pynamodb cannot express: one
# BatchGetItem across tables (the Step's agent with its budgets, stepwise.usage.standing) and reading
# attributes named at run time (a budget's spend per period, stepwise.usage.budgets).
RAW_CLIENTS: dict[tuple[str, str], set[tuple[str, str]]] = {
    ("stepwise.usage.standing", "batch_get"): {
        ("agents", "BatchGetItem"),
        ("quotas", "BatchGetItem"),
        ("run_events", "BatchGetItem"),
    },
    ("stepwise.usage.service", "_raw"): {("quotas", "Query")},
}


@cache
def models() -> dict[str, type[Model]]:
    """The pynamodb models of stepwise.core.tables, by class name."""
    tables = importlib.import_module("stepwise.core.tables")
    return {
        name: value
        for name, value in vars(tables).items()
        if isinstance(value, type) and issubclass(value, Model) and value is not Model
    }


@cache
def model_tables() -> dict[str, str]:
    """Model class -> the template's table logical id, as stepwise.core.tables.bind() binds them: the
    `config.tables()` field it names, that field's environment variable, and the variable's !Ref."""
    from stepwise.core import config
    from stepwise_local.cfn_yaml import load_template

    variables = load_template(ROOT / "template.yaml")["Globals"]["Function"]["Environment"]["Variables"]
    by_field = {name: variables[f.alias]["Ref"] for name, f in config.Tables.model_fields.items() if f.alias}
    [bind] = [
        n
        for n in load("stepwise.core.tables").tree.body
        if isinstance(n, ast.FunctionDef) and n.name == "bind"
    ]
    pairs = next(n.iter for n in ast.walk(bind) if isinstance(n, ast.For))
    assert isinstance(pairs, ast.Tuple)
    found = {}
    for pair in pairs.elts:
        assert isinstance(pair, ast.Tuple)
        model, name = pair.elts
        assert isinstance(model, ast.Name) and isinstance(name, ast.Attribute)
        found[model.id] = by_field[name.attr]
    return found


def table_of_field(field_name: str) -> str:
    from stepwise.core import config
    from stepwise_local.cfn_yaml import load_template

    variables = load_template(ROOT / "template.yaml")["Globals"]["Function"]["Environment"]["Variables"]
    alias = config.Tables.model_fields[field_name].alias
    assert alias
    return str(variables[alias]["Ref"])


@dataclass(frozen=True)
class Kind:
    what: str  # "model" | "index" | "item" | "tx" | "batch"
    model: str = ""


class Operations:
    """The pynamodb operations of one reached definition."""

    def __init__(self, item: Item) -> None:
        self.item = item
        self.module = load(item[0])
        self.node = node_of(item)
        self.env: dict[str, set[Kind]] = {}
        self.needs: set[Need] = set()
        self.unresolved: list[str] = []

    def model_named(self, node: ast.expr) -> str | None:
        """The model class an expression names (a Name resolving to stepwise.core.tables' model)."""
        if isinstance(node, ast.Name):
            if node.id in self.module.aliases:
                imported, attr = self.module.aliases[node.id]
                return attr if imported == "stepwise.core.tables" and attr in models() else None
            if self.module.name == "stepwise.core.tables" and node.id in models():
                return node.id
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and self.module.aliases.get(node.value.id) == ("stepwise.core.tables", None)
            and node.attr in models()
        ):
            return node.attr
        return None

    def annotation_models(self, node: ast.expr | None) -> set[Kind]:
        if node is None:
            return set()
        found: set[Kind] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name | ast.Attribute):
                model = self.model_named(sub)
                if model:
                    found.add(Kind("item", model))
                elif isinstance(sub, ast.Name) and sub.id == "TransactWrite":
                    found.add(Kind("tx"))
            elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):  # a string annotation
                with contextlib.suppress(SyntaxError):
                    found |= self.annotation_models(ast.parse(sub.value, mode="eval").body)
        return found

    def kinds(self, node: ast.expr) -> set[Kind]:
        """What an expression evaluates to, as far as pynamodb is concerned."""
        model = self.model_named(node)
        if model:
            return {Kind("model", model)}
        if isinstance(node, ast.Name):
            return self.env.get(node.id, set())
        if isinstance(node, ast.Attribute):
            found = set()
            for k in self.kinds(node.value):
                if k.what == "model":
                    value = getattr(models()[k.model], node.attr, None)
                    if isinstance(value, Index):
                        found.add(Kind("index", k.model))
                    elif isinstance(value, Attribute):  # `Model.attr.exists()` builds a condition
                        found.add(Kind("attribute", k.model))
            return found
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "TransactWrite":
                return {Kind("tx")}
            owners = self.kinds(func)
            found = {Kind("item", k.model) for k in owners if k.what == "model"}
            if isinstance(func, ast.Attribute):
                for k in self.kinds(func.value):
                    reads = ("get", "query", "scan", "batch_get") if k.what == "model" else ("query", "scan")
                    if k.what in ("model", "index") and func.attr in reads:
                        found.add(Kind("item", k.model))
                    elif k.what == "model" and func.attr == "batch_write":
                        found.add(Kind("batch", k.model))
            if isinstance(func, ast.Name) and func.id in self.module.defs:
                target = self.module.defs[func.id]
                if isinstance(target, ast.FunctionDef | ast.AsyncFunctionDef):
                    found |= self.annotation_models(target.returns)
            return found
        return set()

    def bind(self, target: ast.expr, kinds: set[Kind]) -> bool:
        changed = False
        for name in ast.walk(target):
            if isinstance(name, ast.Name) and kinds - self.env.get(name.id, set()):
                self.env.setdefault(name.id, set()).update(kinds)
                changed = True
        return changed

    def infer(self) -> None:
        """Flow-insensitive: every name's kinds over the whole definition, to a fixpoint."""
        for sub in ast.walk(self.node):
            if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
                for arg in [*sub.args.args, *sub.args.kwonlyargs, *sub.args.posonlyargs]:
                    self.bind(ast.Name(arg.arg), self.annotation_models(arg.annotation))
        changed = True
        while changed:
            changed = False
            for sub in ast.walk(self.node):
                if isinstance(sub, ast.Assign):
                    for target in sub.targets:
                        changed |= self.bind(target, self.kinds(sub.value))
                elif isinstance(sub, ast.AnnAssign):
                    found = self.annotation_models(sub.annotation) | (
                        self.kinds(sub.value) if sub.value else set()
                    )
                    changed |= self.bind(sub.target, found)
                elif isinstance(sub, ast.NamedExpr):
                    changed |= self.bind(sub.target, self.kinds(sub.value))
                elif isinstance(sub, ast.For | ast.AsyncFor | ast.comprehension):
                    changed |= self.bind(sub.target, self.iterated(sub.iter))
                elif isinstance(sub, ast.With | ast.AsyncWith):
                    for with_item in sub.items:
                        if with_item.optional_vars is not None:
                            changed |= self.bind(with_item.optional_vars, self.kinds(with_item.context_expr))

    def iterated(self, node: ast.expr) -> set[Kind]:
        return {Kind("item", k.model) for k in self.kinds(node) if k.what == "item"}

    def need(self, model: str, where: str, action: str) -> None:
        self.needs.add((model_tables()[model], where, f"dynamodb:{action}"))

    def collect(self) -> None:
        self.infer()
        for call in ast.walk(self.node):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            method, receiver = call.func.attr, call.func.value
            if any(isinstance(a, ast.Constant) and a.value == "dynamodb" for a in call.args):
                raw = RAW_CLIENTS.get((self.item[0], self.item[1]))
                if raw is not None:
                    self.needs |= {(table_of_field(f), "table", f"dynamodb:{a}") for f, a in raw}
                    continue
                self.unresolved.append(
                    f"{ast.unparse(call)}: a DynamoDB client that is not pynamodb (EXTERNAL)"
                )
            kinds = self.kinds(receiver)
            for kind in kinds:
                if kind.what == "model" and method in CLASS_OPS:
                    action = CLASS_OPS[method]
                    if (
                        method == "count"
                        and not call.args
                        and not any(k.arg == "hash_key" for k in call.keywords)
                    ):
                        action = "DescribeTable"
                    self.need(kind.model, "table", action)
                elif kind.what == "index" and method in INDEX_OPS:
                    self.need(kind.model, "index", INDEX_OPS[method])
                elif kind.what == "item" and method in ITEM_OPS:
                    self.need(kind.model, "table", ITEM_OPS[method])
                elif kind.what == "batch" and method in BATCH_OPS:
                    self.need(kind.model, "table", BATCH_OPS[method])
                elif kind.what == "tx" and method in TX_OPS:
                    if not call.args:
                        self.unresolved.append(f"{ast.unparse(call)}: a transaction item with no argument")
                        continue
                    first = call.args[0]
                    items = {k.model for k in self.kinds(first) if k.what in ("item", "model")}
                    if not items:
                        items = self.declared(ast.unparse(first), method)
                    for model in items:
                        self.need(model, "table", TX_OPS[method])
            if kinds or not self.module.talks_pynamodb:
                continue
            if method in PYNAMODB_ONLY or method in AMBIGUOUS:
                for model in self.declared(ast.unparse(receiver), method):
                    actions = ITEM_OPS if method in ITEM_OPS else CLASS_OPS
                    self.need(model, "table", actions[method])

    def declared(self, receiver: str, method: str) -> set[str]:
        key = (self.item[0], self.item[1], receiver, method)
        if key not in UNRESOLVED:
            self.unresolved.append(f"{key}: what is `{receiver}`? declare it in UNRESOLVED")
            return set()
        model = UNRESOLVED[key]
        return {model} if model else set()


def external_needs(reach: Reach) -> Iterator[tuple[Need, str]]:
    """Needs of the non-pynamodb clients that reached code names, with the definition that names them."""
    for item in sorted(reach.items):
        node = node_of(item)
        module = load(item[0])
        for call in ast.walk(node):
            if not isinstance(call, ast.Call):
                continue
            qualified = _qualified(module, call.func)
            if qualified in EXTERNAL:
                [table_name] = [k.value for k in call.keywords if k.arg == "table_name"]
                assert isinstance(table_name, ast.Attribute), (
                    f"{item}: table_name must be config.tables().<field>"
                )
                for action in EXTERNAL[qualified]:
                    yield (table_of_field(table_name.attr), "table", f"dynamodb:{action}"), qualified


def _qualified(module: Module, func: ast.expr) -> str | None:
    if isinstance(func, ast.Name) and func.id in module.aliases:
        imported, attr = module.aliases[func.id]
        return f"{imported}.{attr}" if attr else imported
    return None


@dataclass
class Derived:
    needs: set[Need]
    by_definition: dict[Item, set[Need]]
    unresolved: list[str]
    reach: Reach


@cache
def derive(handler: str) -> Derived:
    reach = reach_from(handler)
    needs: set[Need] = set()
    by_definition: dict[Item, set[Need]] = {}
    unresolved: list[str] = list(reach.problems)
    for item in sorted(reach.items):
        operations = Operations(item)
        operations.collect()
        unresolved += [f"{item}: {u}" for u in operations.unresolved]
        if operations.needs:
            by_definition[item] = operations.needs
            needs |= operations.needs
    for need, qualified in external_needs(reach):
        needs.add(need)
        by_definition.setdefault(("<external>", qualified), set()).add(need)
    return Derived(needs, by_definition, unresolved, reach)


def handler_module(function: dict[str, Any]) -> str:
    """The handler module of a template function: CodeUri functions/<role>/ with Handler app.handler."""
    properties = function["Properties"]
    assert properties["Handler"] == "app.handler"
    role = re.fullmatch(r"functions/(\w+)/?", properties["CodeUri"])
    assert role, properties["CodeUri"]
    return f"functions.{role.group(1)}"

"""The API's routes table (stepwise.api.app.ROUTES) against the routes its modules define.

A request loads only the route modules whose globs match its path (stepwise.api.routing). A route no
glob of its own module picks would still be answered (by the resolver with every module), only slowly;
a route another module's glob also picks loads that module for nothing. Both fail here, with the glob
to write.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.app import API, ROUTES

pytestmark = pytest.mark.contract

API_DIR = Path(__file__).resolve().parents[2] / "shared" / "stepwise" / "api"


def _sample(rule: str) -> str:
    """A concrete path for a Powertools rule: each `<param>` becomes a value no literal segment has."""
    return re.sub(r"<[^>]+>", "p0", rule)


def _module_routes() -> list[tuple[str, str, str]]:
    """(module, method, rule) of every route of every module in the table, as its routers define them."""
    out = []
    for line in ROUTES:
        module = importlib.import_module(f"stepwise.api.{line.module}")
        for name in line.routers:
            router = getattr(module, name)
            assert isinstance(router, APIGatewayHttpRouter), f"stepwise.api.{line.module}.{name}"
            for key in router._routes:
                rule, methods = key[0], key[1]
                for method in methods if isinstance(methods, tuple) else (methods,):
                    out.append((line.module, str(method), rule))
    return out


def _glob(rule: str) -> str:
    return re.sub(r"<[^>]+>", "*", rule)


def test_every_route_is_picked_by_its_own_module_alone() -> None:
    wrong = []
    for module, method, rule in _module_routes():
        picked = API.picks(_sample(rule))
        if picked != (module,):
            needs = f"{module}'s line needs {_glob(rule)!r}"
            wrong.append(f"{method} {rule}: picks {picked or 'nothing'}; {needs}")
    assert not wrong, "\n".join(wrong)


def test_every_route_module_is_in_the_table() -> None:
    """A module under stepwise/api that defines a router serves the API: it needs its line in ROUTES
    (stepwise.api.light's routes are the API's too, for the spec)."""
    defining = set()
    for path in API_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) == "APIGatewayHttpRouter"
            ):
                defining.add((path.stem, node.targets[0].id))  # type: ignore[attr-defined]
    listed = {(line.module, name) for line in ROUTES for name in line.routers}
    assert defining == listed


def test_the_spec_and_the_docs_are_served_by_the_resolver_with_every_module() -> None:
    assert API.picks("/v1/openapi.json") == ()
    assert API.picks("/v1/docs") == ()
    assert API.picks("/v1/no-such-thing") == ()


def test_a_request_routes_through_its_modules_resolver_only() -> None:
    resolver = API.for_event({"rawPath": "/v1/agents/agt_0/schedules"})
    rules = {route.path for route in resolver._dynamic_routes + resolver._static_routes}
    schedules = [r for r in rules if "schedules" in r]
    assert schedules and all("schedules" in r for r in rules)

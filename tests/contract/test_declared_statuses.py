"""Every status a route can answer is declared in the spec, with the `Error` schema.

The statuses are derived from the code, not listed by hand, so the spec cannot fall behind it: the named
errors each route's code can raise (tests/contract/raised.py reads them from the bytecode, through the
services and the production stores), plus what the resolver answers for every route before or around it
(stepwise.api.resolver: 401 and 403 `tenant_suspended` on private routes, 400 `malformed_json` and 413
on routes that take a body, 422 and 500 everywhere).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from stepwise.api.app import build
from tests.contract.raised import Raised, raised_by
from tests.contract.test_openapi import ERROR_REF, JSON_BODIES, operations, refs, template_routes

pytestmark = pytest.mark.contract

# What a route's code references but never answers over HTTP, with the reason. Keep it short: each entry
# is a place where the derivation is wrong, not a status the spec may skip.
NOT_ANSWERED: dict[tuple[str, str], dict[int, str]] = {
    # The A2A door answers JSON-RPC: a domain error becomes a JSON-RPC error object in a 200
    # (stepwise.protocols.a2a.from_api_error builds them to translate, not to raise).
    ("POST", "/a2a/{agent_id}"): {404: "JSON-RPC error", 409: "JSON-RPC error", 410: "JSON-RPC error"},
}


@cache
def _routes() -> dict[tuple[str, str], Any]:
    return {
        (route.method, route.openapi_path): route.func
        for route in build()._static_routes + build()._dynamic_routes
        if route.include_in_schema
    }


def required(method: str, path: str) -> dict[int, str]:
    """status → why the route can answer it (an error and the call chain that raises it)."""
    why: dict[int, str] = {422: "the resolver validates every parameter and body", 500: "internal_error"}
    if template_routes().get((method, path), True):
        why[401] = "a private route without a valid key"
        why[403] = "tenant_suspended, checked before routing (stepwise.runs.suspension)"
    if (method, path) in JSON_BODIES:
        why[400] = "malformed_json: the body is not JSON (stepwise.api.resolver)"
        why[413] = "the body is over its limit (stepwise.api.resolver.refused)"
    found: list[Raised] = raised_by(_routes()[(method, path)])
    for raised in sorted(found, key=lambda r: (r.error.status, len(r.via))):
        chain = " → ".join(part.removeprefix("stepwise.") for part in raised.via)
        why.setdefault(raised.error.status, f"{raised.error.__name__} ({raised.error.code}) via {chain}")
    for status in NOT_ANSWERED.get((method, path), {}):
        why.pop(status, None)
    return why


ROUTES = sorted(set(_routes()) & set(operations()), key=lambda route: (route[1], route[0]))


def test_every_route_declares_every_status_its_code_can_answer() -> None:
    """One failure lists every gap, each as the fix to make: a merge that adds routes is fixed at once."""
    gaps: list[str] = []
    for method, path in ROUTES:
        declared = operations()[(method, path)]["responses"]
        func = _routes()[(method, path)]
        for status, why in sorted(required(method, path).items()):
            if str(status) not in declared:
                gaps.append(
                    f"{method} {path}: declare {status} — add {status} to responses(...) of "
                    f"{func.__module__}.{func.__name__}, because: {why}"
                )
    assert not gaps, f"{len(gaps)} undeclared statuses:\n" + "\n".join(gaps)


def test_declared_errors_use_the_error_schema() -> None:
    wrong = [
        f"{method} {path} {status}"
        for method, path in ROUTES
        for status, response in operations()[(method, path)]["responses"].items()
        if status.startswith(("4", "5"))
        for media_type, media in response.get("content", {}).items()
        if not media_type.startswith("text/html") and ERROR_REF not in refs(media["schema"])
    ]

    assert not wrong


def test_the_derivation_sees_through_services_and_stores() -> None:
    """The derivation finds what no route raises itself: the 429 of a quota reached in the run store,
    behind `stores().runs.create`, and the sync run's 502 and 503 from its failure table."""
    assert 429 in required("POST", "/v1/agents/{agent_id}/runs")
    assert 429 in required("POST", "/v1/agents/{agent_id}/schedules")
    assert {502, 503} <= set(required("POST", "/v1/agents/{agent_id}/run"))
    # A NotFound caught and answered as a 422 (an agent tool naming an unknown agent) is not a 404.
    assert 404 not in required("POST", "/v1/agents")

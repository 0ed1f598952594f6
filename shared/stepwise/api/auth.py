"""The tenant comes from the authorizer's context, never from a request body or the model."""

from __future__ import annotations

from typing import Any

from stepwise.core.errors import Unauthorized
from stepwise.core.ids import InvalidTenant, valid_tenant

# Routes that API Gateway serves without the authorizer (template.yaml: `Auth: Authorizer: NONE`).
# The console's page and files are public too: the page asks for a key and sends it on its API calls.
PUBLIC_PATHS = frozenset({"/v1/health", "/v1/console"})
PUBLIC_PREFIXES = ("/v1/approvals/", "/v1/integrations/", "/v1/console/")
# OpenAPI extras for the routes is_public() serves: they override the spec's global bearer requirement.
# (Powertools drops a route's `security=[]` as unset, so the empty list goes in as an extension.)
PUBLIC: dict[str, Any] = {"security": []}


A2A_CARD = "/.well-known/agent-card.json"  # GET /a2a/{agent_id}/.well-known/agent-card.json


TRIGGER_INTAKE = "/in"  # POST /v1/triggers/{trigger_id}/in: the request's signature is the credential


def is_public(path: str) -> bool:
    if path.startswith("/a2a/") and path.endswith(A2A_CARD):
        return True  # an A2A agent card is public (its JSON-RPC interface beside it is not)
    if path.startswith("/v1/triggers/") and path.endswith(TRIGGER_INTAKE) and path.count("/") == 4:
        return True  # a webhook trigger's intake (stepwise.api.trigger_intake)
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def tenant_from_event(event: dict[str, Any]) -> str:
    """The authorizer lets a present-but-bad key through with `auth_error`, so that this answer can be
    the contract's 401 with its error shape (an HTTP API authorizer can only deny with a bare 403)."""
    context = ((event.get("requestContext") or {}).get("authorizer") or {}).get("lambda") or {}
    tenant = context.get("tenant_id")
    try:
        # Checked again here, not only by the authorizer: this is where the tenant enters every key.
        return valid_tenant(tenant)
    except InvalidTenant:
        raise Unauthorized(
            "a valid API key is required: Authorization: Bearer <key>", code="invalid_api_key"
        ) from None


def known_tenant(event: dict[str, Any]) -> str | None:
    """The request's tenant for logs and traces; None on a public route, or for a key the authorizer
    rejected (the route answers 401 itself)."""
    try:
        return tenant_from_event(event)
    except Unauthorized:
        return None


def authorize(authorization: str | None) -> dict[str, Any]:
    """The authorizer's decision (payload 2.0, simple response) for an Authorization header."""
    from stepwise.store import keys

    scheme, _, token = (authorization or "").strip().partition(" ")
    found = keys.owner(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
    if found is None:
        return {"isAuthorized": True, "context": {"auth_error": "invalid_api_key"}}
    tenant, name = found
    # The key's name goes with the request, so what a person does through it (resolving an effect)
    # records who, without the API reading the key table.
    return {"isAuthorized": True, "context": {"tenant_id": tenant, "key_name": name}}


def key_name_from_event(event: dict[str, Any]) -> str:
    """The name of the request's API key, as the authorizer put it in the context ("api key" when an
    authorizer from before names were passed on answered)."""
    context = ((event.get("requestContext") or {}).get("authorizer") or {}).get("lambda") or {}
    name = context.get("key_name")
    return name if isinstance(name, str) and name else "api key"

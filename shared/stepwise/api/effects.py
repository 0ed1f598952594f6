"""/v1/effects: the effects ledger's entries, and a person's word on one whose outcome is unknown (see
stepwise.ledger.review)."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import caller, tenant
from stepwise.api.responses import json_response, responses
from stepwise.core import ids
from stepwise.ledger import review
from stepwise.ledger.review import EffectList, EffectResolve, EffectView, ListedStatus

router = APIGatewayHttpRouter()
EFFECTS = ["effects"]

# Its shape is checked by the service: a key that could not be one is a 404 like an unknown one.
EffectKey = Annotated[str, Path(max_length=80, description="`effect:<sha256>` or `call:<sha256>`, as listed")]


@router.get(
    "/v1/effects",
    summary="List effect entries",
    description="The tenant's entries of the effects ledger, with the tool, the masked arguments, the run "
    "and the time. `status=unknown` lists the effects that may or may not have happened: a replay refuses "
    "to perform them (`effect_unknown`) until a person resolves them. The filters apply after the read, "
    "so a page may be short: follow `next_token` until it is null.",
    responses=responses(200, "A page of entries", 400),
    tags=EFFECTS,
)
def list_effects(
    status: Annotated[ListedStatus | None, Query(description="Only entries in this status")] = None,
    run_id: Annotated[str | None, Query(pattern=ids.RUN_ID, description="Only this run's")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = review.PAGE_LIMIT,
    next_token: Annotated[str | None, Query(max_length=2048)] = None,
) -> Response[EffectList]:
    page = review.list_effects(
        tenant(router), status=status, run_id=run_id, limit=limit, next_token=next_token
    )
    return json_response(page.model_dump(mode="json"))


@router.post(
    "/v1/effects/<key>/resolve",
    summary="Resolve an effect",
    description="Records what a person found out about an effect whose outcome the runtime could not know, "
    "with the API key's name and the time. `done`: it happened, and a replay answers `deduplicated` "
    "without performing it (only a `claimed` or `unknown` entry). `undone`: it did not happen, or was "
    "reversed, and a later replay performs it again (a `done`, `claimed` or `unknown` entry). Resolve a "
    "`claimed` entry only once its run is over. 409 `effect_not_resolvable` or `effect_not_undoable` when "
    "the entry's status does not take that outcome.",
    responses=responses(200, "The entry, resolved", 400, 404, 409, 413),
    tags=EFFECTS,
)
def resolve_effect(key: EffectKey, body: EffectResolve) -> Response[EffectView]:
    entry = review.resolve(tenant(router), key, body, by=caller(router))
    return json_response(entry.model_dump(mode="json"))

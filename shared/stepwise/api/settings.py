"""/v1/settings: per-tenant secrets that builtin tools read (stepwise.settings). Write-only: no
response carries a value."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.responses import json_response, responses
from stepwise.core import ids
from stepwise.settings import service
from stepwise.settings.models import KEY_PATTERN, SettingInfo, SettingList, SettingPut

router = APIGatewayHttpRouter()
SETTINGS = ["settings"]

SettingKey = Annotated[
    str,
    Path(
        pattern=KEY_PATTERN,
        description="Upper case, digits and _, e.g. EXA_API_KEY; or a model provider's key, "
        "providers.<name>.api_key (e.g. providers.openai.api_key)",
    ),
]
ForAgent = Annotated[
    str | None,
    Query(
        pattern=ids.AGENT_ID,
        description="The agent whose own setting this is (only for providers.<name>.api_key): its "
        "model calls use it before the tenant's",
    ),
]


@router.put(
    "/v1/settings/<key>",
    summary="Set a setting",
    description="A per-tenant secret that builtin tools read, e.g. `EXA_API_KEY`, or a model provider's key "
    "(`providers.openai.api_key`, `providers.anthropic.api_key`, ...) that model calls use instead of the "
    "deployment's; with `agent_id`, that agent's own key, used before the tenant's. Write-only: no "
    "response carries a value. 404 `agent_not_found` for an agent that is not the tenant's.",
    responses=responses(
        200,
        "The setting, without its value",
        400,
        404,
        413,
        described={404: "`setting_not_found` for a key no setting can have; `agent_not_found`"},
    ),
    tags=SETTINGS,
)
def put_setting(key: SettingKey, body: SettingPut, agent_id: ForAgent = None) -> Response[SettingInfo]:
    info = service.put(tenant(router), key, body.value, agent_id=agent_id)
    return json_response(info.model_dump(mode="json"))


@router.get(
    "/v1/settings",
    summary="List settings",
    description="Their names and when they changed, never their values.",
    responses=responses(200, "The settings"),
    tags=SETTINGS,
)
def list_settings() -> Response[SettingList]:
    settings = service.list_all(tenant(router))
    return json_response({"settings": [s.model_dump(mode="json") for s in settings]})


@router.delete(
    "/v1/settings/<key>",
    summary="Delete a setting",
    responses=responses(204, "Deleted", 404, content={}),
    tags=SETTINGS,
)
def delete_setting(key: SettingKey, agent_id: ForAgent = None) -> Response[None]:
    service.delete(tenant(router), key, agent_id=agent_id)
    return Response(status_code=204)

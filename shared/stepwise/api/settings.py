"""/v1/settings: per-tenant secrets that builtin tools read (stepwise.settings). Write-only: no
response carries a value."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Path
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.responses import json_response
from stepwise.settings import service
from stepwise.settings.models import KEY_PATTERN, SettingInfo, SettingList, SettingPut

router = APIGatewayHttpRouter()

SettingKey = Annotated[
    str, Path(pattern=KEY_PATTERN, description="Upper case, digits and _, e.g. EXA_API_KEY")
]


@router.put("/v1/settings/<key>")
def put_setting(key: SettingKey, body: SettingPut) -> Response[SettingInfo]:
    info = service.put(tenant(router), key, body.value)
    return json_response(info.model_dump(mode="json"))


@router.get("/v1/settings")
def list_settings() -> Response[SettingList]:
    settings = service.list_all(tenant(router))
    return json_response({"settings": [s.model_dump(mode="json") for s in settings]})


@router.delete("/v1/settings/<key>")
def delete_setting(key: SettingKey) -> Response[None]:
    service.delete(tenant(router), key)
    return Response(status_code=204)

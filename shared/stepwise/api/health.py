"""/v1/health: answers without a key, so a load balancer or a person can see the API is up."""

from typing import Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel

from stepwise.api.auth import PUBLIC
from stepwise.api.responses import json_response, responses

router = APIGatewayHttpRouter()


class Health(BaseModel):
    status: Literal["ok"]


@router.get(
    "/v1/health",
    summary="Health check",
    description="Public: answers without a key.",
    responses=responses(200, "The API is up", public=True),
    tags=["health"],
    openapi_extensions=PUBLIC,
)
def health() -> Response[Health]:
    return json_response({"status": "ok"})

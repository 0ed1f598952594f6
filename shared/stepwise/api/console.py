"""GET /v1/console and its files: the web console. Public routes (no key for the page itself): the page
asks for the API key and sends it with each API call it makes, like any other client."""

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Header
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.auth import PUBLIC
from stepwise.api.responses import responses
from stepwise.console import assets
from stepwise.core.errors import NotFound

router = APIGatewayHttpRouter()
CONSOLE = ["console"]
_TEXT = {"schema": {"type": "string"}}
_NOT_MODIFIED: dict[int, OpenAPIResponse] = {
    304: {"description": "Not modified: the browser's copy (`If-None-Match`) is current", "content": {}}
}

IfNoneMatch = Annotated[
    str | None, Header(alias="if-none-match", description="The ETag of a copy the browser has")
]


def _serve(asset: assets.Asset, if_none_match: str | None) -> Response[str]:
    headers = {**assets.HEADERS, "ETag": asset.etag}
    if if_none_match is not None and asset.etag in {tag.strip() for tag in if_none_match.split(",")}:
        return Response(status_code=304, body="", headers=headers)
    return Response(status_code=200, content_type=asset.content_type, body=asset.body, headers=headers)


@router.get(
    "/v1/console",
    summary="The web console",
    description="A page for people: agents, runs, a run's live timeline, approvals and client tools to "
    "answer, a session's conversation. Public: the page asks for an API key and keeps it in the tab's "
    "session storage.",
    responses={
        **responses(200, "The page", public=True, content={assets.MEDIA_TYPES[".html"]: _TEXT}),
        **_NOT_MODIFIED,
    },
    tags=CONSOLE,
    openapi_extensions=PUBLIC,
)
def console_page(if_none_match: IfNoneMatch = None) -> Response[str]:
    return _serve(assets.page(), if_none_match)


@router.get(
    "/v1/console/<asset>",
    summary="A file of the web console",
    description="The page's scripts (ES modules) and styles. Public.",
    responses={
        **responses(
            200,
            "The file",
            404,
            public=True,
            content={assets.MEDIA_TYPES[".js"]: _TEXT, assets.MEDIA_TYPES[".css"]: _TEXT},
            described={404: "No such file (`asset_not_found`)"},
        ),
        **_NOT_MODIFIED,
    },
    tags=CONSOLE,
    openapi_extensions=PUBLIC,
)
def console_asset(asset: str, if_none_match: IfNoneMatch = None) -> Response[str]:
    found = assets.asset(asset)
    if found is None:
        raise NotFound("the console has no such file", code="asset_not_found")
    return _serve(found, if_none_match)

"""/v1/responses: the OpenAI Responses API door (stepwise.protocols.responses does the translation).

Creating (blocking or streaming) and retrieving are served by the light events function, like the
other routes a client keeps busy while it waits on a run (`router`); cancelling ends a run, which
reaches far beyond it, so it is the API function's (`cancel_router`). Errors on these paths are in
OpenAI's shape, `{"error": {message, type, param, code}}`, which the openai client raises by status.
"""

from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter
from pydantic import BaseModel, Field

from stepwise.api import resolver
from stepwise.api.context import tenant
from stepwise.api.responses import JSON, Error, json_response, responses
from stepwise.protocols import responses as door
from stepwise.protocols.responses_output import ResponseStatus

router = APIGatewayHttpRouter()
cancel_router = APIGatewayHttpRouter()
TAGS = ["openai responses"]
PREFIX = "/v1/responses"

resolver.shape_errors(PREFIX, door.error_body)


class OpenAIErrorInfo(BaseModel):
    message: str
    type: Literal["invalid_request_error", "server_error"]
    param: str | None = Field(description="The request field at fault, when one is")
    code: str = Field(description="Stable and machine-readable, as in the rest of the API")


class OpenAIError(BaseModel):
    """An error on /v1/responses, in OpenAI's shape."""

    error: OpenAIErrorInfo


class OpenAIResponse(BaseModel):
    """A response as the openai client's `Response` reads it; its id is the run's."""

    id: str
    object: Literal["response"]
    created_at: float
    completed_at: float | None
    status: ResponseStatus
    model: str = Field(description='`"agent:<agent_id>"`')
    instructions: str | None
    metadata: dict[str, str]
    output: list[dict[str, Any]] = Field(
        description="`message` items (the agent's text) and `function_call` items (the tools the agent "
        "called itself, for information: status `completed` once their result is in)"
    )
    error: dict[str, Any] | None
    incomplete_details: dict[str, Any] | None
    parallel_tool_calls: bool
    tool_choice: str
    tools: list[dict[str, Any]]
    usage: dict[str, Any] | None


# One Server-Sent Event of a Responses stream (OpenAPI 3.1 has no itemSchema yet).
SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "description": "The event's `type`, e.g. `response.output_text.delta`"},
        "data": {"type": "string", "description": "The event as JSON, with `type` and `sequence_number`"},
    },
    "required": ["event", "data"],
}


def documented(status: int, description: str, *errors: int, stream: bool) -> dict[int, OpenAPIResponse]:
    """The route's responses: the Response (or its stream), then errors in OpenAI's shape, except the
    checks before routing (401, 413), which answer in the contract's."""
    content: dict[str, Any] = {JSON: {"model": OpenAIResponse}}
    if stream:
        content["text/event-stream"] = {"schema": SSE_EVENT}
    documented = responses(status, description, *errors, content=content)
    for code, response in documented.items():
        if code >= 400 and code not in (401, 413):
            response["content"] = {JSON: {"model": OpenAIError | Error}}
    return documented


STREAMED = (
    "With `stream: true`, Server-Sent Events (`response.created`, `response.output_item.added`, "
    "`response.output_text.delta`, ..., `response.completed` / `response.failed` / `response.incomplete`) "
    "for at most 20 s: a stream that ends on `response.in_progress` is resumed with "
    "`GET /v1/responses/{response_id}?stream=true&starting_after=<its sequence_number>`."
)


def _answer(result: Any) -> Response:
    if isinstance(result, str):
        return Response(
            status_code=200,
            content_type="text/event-stream",
            body=result,
            headers={"Cache-Control": "no-cache"},
        )
    return json_response(result)


@router.post(
    PREFIX,
    summary="Create a response (OpenAI Responses API)",
    description='Starts a run of the agent named by `model: "agent:<agent_id>"` on `input`\'s last user '
    "message; `previous_response_id` continues its session, `instructions` are appended to the agent's "
    "system prompt for this run only, `metadata` is kept on the run. Answers once the run has ended or "
    "waits on someone (`incomplete`, with a message naming the interactions to answer), or after 25 s "
    "(`in_progress`); with `background: true`, at once (`queued`). " + STREAMED + " An "
    "`Idempotency-Key` header makes a retried create start no second run.",
    responses=documented(200, "The response, or its event stream", 400, 404, 409, 413, 429, stream=True),
    tags=TAGS,
)
def create_response(
    body: door.ResponseCreate,
    key: Annotated[
        str | None,
        Header(alias="idempotency-key", description="The same key and body give the same run for 24 hours"),
    ] = None,
) -> Response[dict[str, Any] | str]:
    return _answer(door.create(tenant(router), body, key=key, lambda_context=router.lambda_context))


@router.get(
    PREFIX + "/<response_id>",
    summary="Retrieve a response (OpenAI Responses API)",
    description="The run as a Response. " + STREAMED,
    responses=documented(200, "The response, or its event stream", 404, stream=True),
    tags=TAGS,
)
def retrieve_response(
    response_id: str,
    stream: Annotated[bool, Query(description="Stream its events from the start of its log")] = False,
    starting_after: Annotated[
        int | None, Query(ge=0, description="Send only the events after this sequence_number")
    ] = None,
) -> Response[dict[str, Any] | str]:
    tenant_id = tenant(router)
    if stream:
        return _answer(door.stream(tenant_id, response_id, starting_after))
    return _answer(door.retrieve(tenant_id, response_id))


@cancel_router.post(
    PREFIX + "/<response_id>/cancel",
    summary="Cancel a response (OpenAI Responses API)",
    description="Cancels its run; 409 `run_finished` when it has ended already.",
    responses=documented(200, "The cancelled response", 404, 409, stream=False),
    tags=TAGS,
)
def cancel_response(response_id: str) -> Response[OpenAIResponse]:
    return json_response(door.cancel(tenant(cancel_router), response_id))

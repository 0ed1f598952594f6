"""/v1/uploads: presigned PUTs for files that runs take as attachments."""

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayHttpRouter

from stepwise.api.context import tenant
from stepwise.api.responses import json_response, responses
from stepwise.attachments import service
from stepwise.attachments.models import UPLOAD_EXPIRES_SECONDS, UPLOAD_LIMIT, UploadCreate, UploadTicket

router = APIGatewayHttpRouter()


@router.post(
    "/v1/uploads",
    summary="Upload a file",
    description=f"A presigned S3 PUT for one file of at most {UPLOAD_LIMIT} bytes, valid for "
    f"{UPLOAD_EXPIRES_SECONDS // 60} minutes: PUT the bytes to `url` with exactly `headers`, then start a "
    "run with `attachments: [{upload_id}]`. The run checks the bytes against `content_type` (422 when "
    "they are another type, or none the API takes: PNG, JPEG, GIF, WebP, PDF, CSV, JSON, Markdown, text).",
    responses=responses(201, "Where to PUT the file", 400, 413, 503),
    tags=["runs"],
)
def create_upload(body: UploadCreate) -> Response[UploadTicket]:
    ticket = service.create_upload(tenant(router), body)
    return json_response(ticket.model_dump(mode="json"), 201)

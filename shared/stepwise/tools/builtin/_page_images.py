"""web_scrape's images: fetched through the SSRF guard and kept under the run, for the model to be shown.

For `include_images: true` the page's first MAX_IMAGES images (in page order, inline data: images never)
are fetched, each through `guarded_client` (every address checked, redirects included) and read to at
most the attachment image limit (`intake.TOOL_IMAGE_LIMIT`); an image whose bytes are not PNG, JPEG,
GIF or WebP, too big, blocked or unreachable is listed with why it was skipped. The ones kept become the
result's `files`, which reach the model as an MCP tool's images do (`stepwise.attachments.render`): image
parts for a vision model, the deployment's vision model's words for one that cannot see
(`STEPWISE_VISION_MODEL`). With neither, nothing is fetched: the images are listed by alt text and URL,
which is all such a model could use.

A URL that is itself an image (its path ends in an image extension and its bytes are one) is answered
without the scraper: Firecrawl has no text to give for it.
"""

from __future__ import annotations

import httpx

from stepwise.attachments.intake import TOOL_IMAGE_LIMIT, keep_tool_image
from stepwise.attachments.models import Attachment
from stepwise.attachments.sniff import IMAGE_TYPES, Inspector
from stepwise.core.errors import Unprocessable
from stepwise.net.outbound import OutboundRefused, ResponseTooLarge
from stepwise.net.ssrf import AllowHosts, guarded_client
from stepwise.tools.builtin import ToolScope
from stepwise.tools.http_tool import USER_AGENT

MAX_IMAGES = 5
FETCH_TIMEOUT_SECONDS = 15.0  # per image
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".webp")
TOOL = "web_scrape"


def looks_like_image(url: httpx.URL) -> bool:
    return url.path.lower().endswith(IMAGE_EXTENSIONS)


def usable(scope: ToolScope) -> bool:
    """Whether images are worth fetching for this agent: its model sees them, or a vision model
    describes them for it."""
    from stepwise.attachments.render import supports_vision
    from stepwise.attachments.vision import vision_model

    if vision_model() is not None:
        return True
    return scope.model is not None and supports_vision(scope.model)


def fetch(url: str, allow_hosts: AllowHosts = None) -> tuple[bytes, str] | str:
    """The image's bytes and sniffed type, or why it was skipped."""
    try:
        with (
            guarded_client(
                timeout=FETCH_TIMEOUT_SECONDS, max_response_bytes=TOOL_IMAGE_LIMIT, allow_hosts=allow_hosts
            ) as client,
            client.stream("GET", url, headers={"User-Agent": USER_AGENT, "Accept": "image/*"}) as response,
        ):
            data = response.read()
            status = response.status_code
    except ResponseTooLarge:
        return f"larger than {TOOL_IMAGE_LIMIT:,} bytes"
    except OutboundRefused as exc:
        return exc.message
    except httpx.TimeoutException:
        return f"no answer within {FETCH_TIMEOUT_SECONDS:g} seconds"
    except httpx.HTTPError as exc:
        return f"could not be fetched ({type(exc).__name__})"
    if not 200 <= status < 300:
        return f"the server answered HTTP {status}"
    inspector = Inspector()
    inspector.feed(data)
    try:
        # The bytes decide, whatever the server declared: a PNG served as image/jpeg is still shown.
        found = inspector.content_type("application/octet-stream", "image")
    except Unprocessable:
        found = ""
    if found not in IMAGE_TYPES:
        return "not a PNG, JPEG, GIF or WebP image"
    return data, found


def collect(
    images: list[dict[str, str]], *, page_url: str, scope: ToolScope, allow_hosts: AllowHosts = None
) -> tuple[list[dict[str, str]], list[Attachment]]:
    """The first MAX_IMAGES of `images` ({url, alt}) fetched and kept under the run: the listing, each
    entry marked `shown` (attachment n of the result) or `skipped` with the reason, and the attachments."""
    listed: list[dict[str, str]] = []
    kept: list[Attachment] = []
    for image in images:
        entry = dict(image)
        listed.append(entry)
        if len(listed) > MAX_IMAGES:
            continue  # listed, not fetched
        try:
            url = str(httpx.URL(page_url).join(image["url"]))
        except httpx.InvalidURL:
            entry["skipped"] = "not a valid URL"
            continue
        entry["url"] = url
        fetched = fetch(url, allow_hosts)
        if isinstance(fetched, str):
            entry["skipped"] = fetched
            continue
        data, content_type = fetched
        attachment = keep_tool_image(scope.tenant_id, scope.run_id, TOOL, content_type, data)
        if attachment is None:
            entry["skipped"] = "not an image the model can be shown"
            continue
        kept.append(attachment)
        entry["shown"] = f"image {len(kept)} ({attachment.content_type}, {attachment.size} bytes)"
    return listed, kept

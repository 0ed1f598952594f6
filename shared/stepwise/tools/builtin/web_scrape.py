"""web_scrape: read one web page as clean markdown (and/or HTML, links) through Firecrawl.

The provider contract, as Firecrawl documents its v1 scrape endpoint
(https://docs.firecrawl.dev/api-reference/endpoint/scrape):

    POST {FIRECRAWL_BASE_URL or https://api.firecrawl.dev}/v1/scrape
    Authorization: Bearer {FIRECRAWL_API_KEY}
    {"url", "formats": ["markdown" | "html" | "links", ...], "onlyMainContent": true, "timeout": 30000}

    200 {"success": true, "data": {"markdown"?, "html"?, "links"?: [str],
         "metadata": {"title"?, "description"?, "sourceURL"?, "statusCode"?, "error"?}}}
    4xx/5xx {"success": false, "error": "..."}; 408 when the scrape timed out, 402 when out of credits

Firecrawl fetches the page from its own network, but the URL is still checked with the SSRF guard's
`check_url` first: literal internal addresses and names resolving to them are refused before Firecrawl is
asked (that matters for a self-hosted Firecrawl inside a VPC, and keeps the tool's behaviour the same as
http_request's). The check is advisory, as `check_url` says; the fetch itself is Firecrawl's.

`include_images`: false (the default) replaces markdown image tags by their alt text, which saves tokens
the model cannot use; true keeps them and adds `images`, the page's image URLs with their alt text
(inline data: images are never kept), and the first five are fetched and shown to the model
(`_page_images`: through the SSRF guard, within the attachment image limits; image parts for a vision
model, a vision model's description for one that cannot see, else only the list). A URL that is itself
an image is fetched directly, without Firecrawl (and without needing its key).

The result holds at most 200,000 characters of page content, shared in order by markdown, html and links;
each cut carries a visible marker. `FIRECRAWL_BASE_URL` (environment) replaces the base URL, for tests and
proxies; the call still goes through the SSRF guard.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stepwise.core.config import Providers, providers
from stepwise.net.ssrf import AllowHosts, BlockedDestination, check_url
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._page_images import collect, fetch, looks_like_image, usable
from stepwise.tools.builtin._provider import (
    base_url,
    cap,
    error_detail,
    http_url,
    not_configured,
    post_json,
    setting,
)

NAME = "web_scrape"
Format = Literal["markdown", "html", "links"]
DEFAULT_FORMATS: list[Format] = ["markdown"]
CONTENT_LIMIT = 200_000  # characters of page content in one result, all formats together
MAX_IMAGES = 100
API_KEY_SETTING = "FIRECRAWL_API_KEY"
BASE_URL_ENV = Providers.variable("firecrawl_base_url")
DEFAULT_BASE_URL = "https://api.firecrawl.dev"
PROVIDER = "Firecrawl"
SCRAPE_TIMEOUT_MS = 30_000  # Firecrawl gives up on the page after this and answers 408
# Beyond Firecrawl's own timeout, so that its 408 (which says what happened) arrives before ours.
TIMEOUT_SECONDS = SCRAPE_TIMEOUT_MS / 1000 + 15

# ![alt](src "title"): the image syntax Firecrawl's markdown uses.
_MARKDOWN_IMAGE = re.compile(r"!\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")

DESCRIPTION = (
    "Read a web page as clean markdown (main content only), and optionally its HTML or its links. "
    f"Content is cut at {CONTENT_LIMIT:,} characters. Set include_images to see the page's images (the "
    "first five are shown to you) and list their URLs. A URL of an image is shown as that image."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Checked as an http(s) URL before Firecrawl is asked (http_url): "format" is only what the model reads.
    url: str = Field(json_schema_extra={"format": "uri"}, description="The page's absolute http(s) URL.")
    # uniqueItems is checked with the schema (by the registry): pydantic has no such constraint on a list.
    formats: list[Format] = Field(
        DEFAULT_FORMATS,
        min_length=1,
        json_schema_extra={"uniqueItems": True},
        description="What to return: markdown (default), html, links.",
    )
    include_images: bool = Field(
        False, description="Show the page's first images and list their URLs (and alt text)."
    )


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    return scrape(arguments, settings=settings, scope=scope)


def scrape(
    arguments: Arguments,
    *,
    settings: Settings,
    timeout: float = TIMEOUT_SECONDS,
    allow_hosts: AllowHosts = None,
    scope: ToolScope | None = None,
) -> ToolResult:
    """Scrape the page through Firecrawl. `allow_hosts` None reads STEPWISE_ALLOW_HOSTS; it applies to
    both the page's URL and Firecrawl's, and to the images fetched. Without `scope` (no run to keep
    images under) images are only listed."""
    try:
        url = http_url(arguments.url)
        check_url(url, allow_hosts)
    except ValueError as exc:
        return ToolResult.failure("invalid_arguments", str(exc))
    except BlockedDestination as exc:
        return ToolResult.failure(exc.code, exc.message)
    if looks_like_image(url):
        direct = _image_itself(arguments.url, scope, allow_hosts)
        if direct is not None:
            return direct
    api_key = setting(settings, API_KEY_SETTING)
    if api_key is None:
        return not_configured(NAME, API_KEY_SETTING)
    payload = firecrawl_request(arguments)
    answer = post_json(
        f"{base_url(providers().firecrawl_base_url, DEFAULT_BASE_URL)}/v1/scrape",
        payload,
        provider=PROVIDER,
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=timeout,
        allow_hosts=allow_hosts,
    )
    if not answer.ok:
        return answer
    result = scrape_result(answer.output, arguments)
    images = result.output.get("images") if result.ok else None
    if not images or scope is None or not usable(scope):
        return result
    listed, kept = collect(images, page_url=result.output["url"], scope=scope, allow_hosts=allow_hosts)
    return ToolResult(output={**result.output, "images": listed}, files=kept)


def _image_itself(url: str, scope: ToolScope | None, allow_hosts: AllowHosts) -> ToolResult | None:
    """The answer for a URL whose bytes are an image, or None to scrape it as a page after all."""
    fetched = fetch(url, allow_hosts)
    if isinstance(fetched, str):
        return None  # not an image after all, or not fetchable: the scraper says what it finds
    data, content_type = fetched
    output: dict[str, Any] = {"url": url, "content_type": content_type, "size": len(data)}
    if scope is None or not usable(scope):
        output["note"] = "this URL is an image; you cannot see images and no vision model describes them"
        return ToolResult(output=output)
    from stepwise.attachments.intake import keep_tool_image

    attachment = keep_tool_image(scope.tenant_id, scope.run_id, NAME, content_type, data)
    if attachment is None:
        output["note"] = "this URL is an image too large to be shown"
        return ToolResult(output=output)
    output["images"] = [{"url": url, "alt": "", "shown": f"image 1 ({content_type}, {len(data)} bytes)"}]
    return ToolResult(output=output, files=[attachment])


def firecrawl_request(arguments: Arguments) -> dict[str, Any]:
    """Firecrawl's request body."""
    return {
        "url": arguments.url,
        "formats": list(arguments.formats),
        "onlyMainContent": True,
        "timeout": SCRAPE_TIMEOUT_MS,
    }


def scrape_result(answer: Any, arguments: Arguments) -> ToolResult:
    """The tool's output for Firecrawl's 200 answer, within CONTENT_LIMIT."""
    if not isinstance(answer, dict) or answer.get("success") is False:
        detail = error_detail(answer.get("error", "") if isinstance(answer, dict) else "")
        return ToolResult.failure("provider_error", f"{PROVIDER} could not scrape the page: {detail}")
    data = answer.get("data")
    if not isinstance(data, dict):
        return ToolResult.failure("provider_error", f"{PROVIDER} answered without the page's data")
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    formats = arguments.formats
    include_images = arguments.include_images

    output: dict[str, Any] = {"url": metadata.get("sourceURL") or arguments.url}
    for source, target in (("title", "title"), ("description", "description"), ("statusCode", "status_code")):
        if metadata.get(source) is not None:
            output[target] = metadata[source]
    budget = CONTENT_LIMIT
    if "markdown" in formats:
        markdown = _text(data.get("markdown"))
        if include_images:
            output["images"] = image_urls(markdown)
        markdown = keep_images(markdown) if include_images else drop_images(markdown)
        output["markdown"] = cap(markdown, budget)
        budget -= min(len(markdown), budget)
    if "html" in formats:
        html = _text(data.get("html"))
        output["html"] = cap(html, budget)
        budget -= min(len(html), budget)
    if "links" in formats:
        links = data.get("links")
        links = [_text(link) for link in links] if isinstance(links, list) else []
        output["links"], omitted = cap_links(links, budget)
        if omitted:
            output["links_omitted"] = (
                f"…[{omitted} more link(s) omitted: the {CONTENT_LIMIT:,}-character cap]"
            )
    return ToolResult(output=output)


def drop_images(markdown: str) -> str:
    """Markdown with every image tag replaced by its alt text."""
    return _MARKDOWN_IMAGE.sub(lambda match: match.group(1), markdown)


def keep_images(markdown: str) -> str:
    """Markdown with inline data: images (base64, often huge) replaced by a short placeholder."""

    def placeholder(match: re.Match[str]) -> str:
        alt, src = match.group(1), match.group(2)
        return f"![{alt}](inline image omitted)" if src.startswith("data:") else match.group(0)

    return _MARKDOWN_IMAGE.sub(placeholder, markdown)


def image_urls(markdown: str) -> list[dict[str, str]]:
    """The markdown's images as {url, alt}, in order, without duplicates or inline data: images."""
    seen: dict[str, str] = {}
    for match in _MARKDOWN_IMAGE.finditer(markdown):
        alt, src = match.group(1), match.group(2)
        if not src.startswith("data:") and src not in seen and len(seen) < MAX_IMAGES:
            seen[src] = alt
    return [{"url": url, "alt": alt} for url, alt in seen.items()]


def cap_links(links: list[str], budget: int) -> tuple[list[str], int]:
    """The links that fit in `budget` characters, in order, and how many did not."""
    kept: list[str] = []
    for index, link in enumerate(links):
        budget -= len(link)
        if budget < 0:
            return kept, len(links) - index
        kept.append(link)
    return kept, 0


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""

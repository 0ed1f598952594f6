"""web_search: search the web with Exa (https://exa.ai/docs/reference/search).

The provider contract, as Exa documents it:

    POST {EXA_BASE_URL or https://api.exa.ai}/search
    x-api-key: {EXA_API_KEY}
    {"query", "type", "numResults", "includeDomains"?, "excludeDomains"?, "startPublishedDate"?,
     "endPublishedDate"?, "category"?,
     "contents": {"highlights": {"maxCharacters"}} | {"text": {"maxCharacters"}}}

    200 {"requestId", "resolvedSearchType"?, "results": [{"title", "url", "id", "publishedDate"?,
         "author"?, "score"?, "text"?, "highlights"?: [str], "highlightScores"?}], "costDollars"?}

Optional fields are sent only when the model gave them. `keyword` is sent as Exa's `type: "keyword"`,
which Exa's older reference documents and its current one no longer lists; if Exa refuses it, the model
reads Exa's 400 as `provider_rejected`.

Caps, per content mode (characters): `highlights` asks Exa for at most 2,000 characters of excerpts
per result and keeps at most that; `compact_text` 1,000 characters of page text per result; `full_text`
5,000. The whole result is then held under 20,000 (highlights, compact_text) or 50,000 (full_text)
characters by dropping trailing results, with a visible note saying how many were dropped. Every cut
carries a visible marker.

`EXA_BASE_URL` (environment) replaces the base URL, for tests and proxies; the call still goes through
the SSRF guard.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from stepwise.core.config import Providers, providers
from stepwise.net.ssrf import AllowHosts
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._provider import (
    base_url,
    cap,
    not_configured,
    post_json,
    setting,
)

NAME = "web_search"
SearchType = Literal["auto", "neural", "keyword", "deep", "deep-reasoning"]
ContentMode = Literal["highlights", "compact_text", "full_text"]
# Exa's documented categories, as its references over time list them.
Category = Literal[
    "company",
    "research paper",
    "news",
    "pdf",
    "github",
    "tweet",
    "personal site",
    "financial report",
    "people",
]
DEFAULT_SEARCH_TYPE: SearchType = "auto"
DEFAULT_CONTENT_MODE: ContentMode = "highlights"
DEFAULT_NUM_RESULTS = 5
MAX_NUM_RESULTS = 10
API_KEY_SETTING = "EXA_API_KEY"
BASE_URL_ENV = Providers.variable("exa_base_url")
DEFAULT_BASE_URL = "https://api.exa.ai"
PROVIDER = "Exa"
TIMEOUT_SECONDS = 30.0
# Exa's deep searches iterate over several queries and read more pages: they take longer.
DEEP_TIMEOUT_SECONDS = 90.0
DEEP_TYPES = frozenset({"deep", "deep-reasoning"})


@dataclass(frozen=True)
class ModeCaps:
    per_result: int  # characters of content per result (also what Exa is asked for)
    total: int  # characters of the whole result


MODE_CAPS: dict[str, ModeCaps] = {
    "highlights": ModeCaps(per_result=2_000, total=20_000),
    "compact_text": ModeCaps(per_result=1_000, total=20_000),
    "full_text": ModeCaps(per_result=5_000, total=50_000),
}

DESCRIPTION = (
    "Search the web (Exa) and get titles, URLs, dates and relevant content of the best results. "
    "search_type: auto (default), neural (by meaning), keyword (exact terms), or the slower, broader "
    "deep and deep-reasoning. content_mode: highlights (default, the most relevant excerpts), "
    "compact_text (~1,000 characters of each page) or full_text (~5,000)."
)
Domain = Annotated[str, StringConstraints(min_length=1)]


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="What to search for, in natural language.")
    search_type: SearchType = DEFAULT_SEARCH_TYPE
    num_results: int = Field(DEFAULT_NUM_RESULTS, ge=1, le=MAX_NUM_RESULTS)
    include_domains: list[Domain] | None = Field(
        None, description="Only results from these domains, e.g. arxiv.org."
    )
    exclude_domains: list[Domain] | None = Field(None, description="No results from these domains.")
    # ISO 8601 is checked where Exa's request is built (exa_request): JSON Schema's format is not enforced.
    start_date: str | None = Field(
        None, description="Only pages published on or after this ISO 8601 date or date-time."
    )
    end_date: str | None = Field(
        None, description="Only pages published on or before this ISO 8601 date or date-time."
    )
    category: Category | None = Field(None, description="A kind of page to focus on.")
    content_mode: ContentMode = DEFAULT_CONTENT_MODE


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = True
EFFECT: Literal["none"] = "none"
KEY_FIELDS: list[str] = []


class Config(BaseModel):
    """`search_type`, when set, pins the search type whatever the model asks for (deep searches cost more)."""

    model_config = ConfigDict(extra="forbid")

    search_type: SearchType | None = None


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    return search(arguments, settings=settings, config=config)


def search(
    arguments: Arguments,
    *,
    settings: Settings,
    config: Config | None = None,
    timeout: float | None = None,
    allow_hosts: AllowHosts = None,
) -> ToolResult:
    """Search Exa. `timeout` None picks by search type; `allow_hosts` None reads STEPWISE_ALLOW_HOSTS."""
    if config is not None and config.search_type is not None:
        arguments = arguments.model_copy(update={"search_type": config.search_type})
    try:
        payload = exa_request(arguments)
    except ValueError as exc:
        return ToolResult.failure("invalid_arguments", str(exc))
    api_key = setting(settings, API_KEY_SETTING)
    if api_key is None:
        return not_configured(NAME, API_KEY_SETTING)
    answer = post_json(
        f"{base_url(providers().exa_base_url, DEFAULT_BASE_URL)}/search",
        payload,
        provider=PROVIDER,
        headers={"x-api-key": api_key},
        timeout=timeout or (DEEP_TIMEOUT_SECONDS if payload["type"] in DEEP_TYPES else TIMEOUT_SECONDS),
        allow_hosts=allow_hosts,
    )
    if not answer.ok:
        return answer
    return search_result(answer.output, arguments.content_mode, payload["type"])


def exa_request(arguments: Arguments) -> dict[str, Any]:
    """Exa's request body; ValueError for a date that is not ISO 8601."""
    mode = arguments.content_mode
    per_result = MODE_CAPS[mode].per_result
    contents = (
        {"highlights": {"maxCharacters": per_result}}
        if mode == "highlights"
        else {"text": {"maxCharacters": per_result}}
    )
    payload: dict[str, Any] = {
        "query": arguments.query,
        "type": arguments.search_type,
        "numResults": arguments.num_results,
        "contents": contents,
    }
    optional = {
        "include_domains": "includeDomains",
        "exclude_domains": "excludeDomains",
        "start_date": "startPublishedDate",
        "end_date": "endPublishedDate",
        "category": "category",
    }
    for name, field in optional.items():
        value = getattr(arguments, name)
        if value in (None, [], ""):
            continue
        if name in ("start_date", "end_date"):
            _check_iso_date(name, value)
        payload[field] = value
    return payload


def search_result(answer: Any, mode: str, search_type: str) -> ToolResult:
    """The tool's output for Exa's answer: each result's metadata and content, within the mode's caps."""
    if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
        return ToolResult.failure("provider_error", f"{PROVIDER} answered without a list of results")
    caps = MODE_CAPS[mode]
    output: dict[str, Any] = {
        "search_type": answer.get("resolvedSearchType") or search_type,
        "results": [],
    }
    size = len(json.dumps(output, ensure_ascii=False))
    results = [r for r in answer["results"] if isinstance(r, dict)]
    for index, raw in enumerate(results):
        item = _result(raw, mode, caps.per_result)
        item_size = len(json.dumps(item, ensure_ascii=False)) + 2
        if size + item_size > caps.total:
            omitted = len(results) - index
            output["omitted"] = (
                f"…[{omitted} more result(s) omitted: the {caps.total:,}-character cap for {mode}]"
            )
            break
        output["results"].append(item)
        size += item_size
    return ToolResult(output=output)


def _result(raw: dict[str, Any], mode: str, limit: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "title": _text(raw.get("title")),
        "url": _text(raw.get("url")),
    }
    for source, target in (("publishedDate", "published_date"), ("author", "author")):
        if raw.get(source):
            item[target] = cap(_text(raw[source]), 200)
    if mode == "highlights":
        highlights = raw.get("highlights")
        item["highlights"] = cap_highlights(highlights if isinstance(highlights, list) else [], limit)
    else:
        item["text"] = cap(_text(raw.get("text")), limit)
    return item


def cap_highlights(highlights: list[Any], limit: int) -> list[str]:
    """Highlights in order until `limit` characters in all; the one crossing it is cut with a marker."""
    kept: list[str] = []
    remaining = limit
    for index, highlight in enumerate(highlights):
        if remaining <= 0:
            kept.append(f"…[{len(highlights) - index} more highlight(s) omitted]")
            break
        text = _text(highlight)
        kept.append(cap(text, remaining))
        remaining -= len(text)
    return kept


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _check_iso_date(name: str, value: str) -> None:
    try:
        if len(value) == 10:
            date.fromisoformat(value)
        else:
            datetime.fromisoformat(value)
    except ValueError:
        example = "2024-01-31 or 2024-01-31T00:00:00Z"
        raise ValueError(f"{name}: {value!r} is not an ISO 8601 date or date-time (e.g. {example})") from None

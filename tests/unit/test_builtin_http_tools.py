"""The builtin tools that speak HTTP (http_request, code_execute, web_search, web_scrape), without a network:
their shape, their schemas, how arguments map to provider requests, the caps and the errors that come
before any request. Sockets are blocked (tests/unit/conftest.py), so a refused destination is shown to
be refused before a connection is even attempted."""

from __future__ import annotations

import inspect
import json
import socket
from types import ModuleType
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ValidationError

from stepwise.llm.fake_args import example_arguments
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import (
    StaticSettings,
    ToolScope,
    _provider,
    code_execute,
    http_request,
    web_scrape,
    web_search,
)
from stepwise.tools.http_tool import HTTP_READ_LIMIT, TRUNCATION_MARKER
from stepwise.tools.registry import run_builtin

SCOPE = ToolScope("t1", "a1", "r1", "s1")
TOOLS = [http_request, code_execute, web_search, web_scrape]
NO_SETTINGS = StaticSettings()
INTERNAL_URLS = ["http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/", "http://[::1]:9001/"]


@pytest.fixture(autouse=True)
def no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    # The conftest blocks connecting; a name lookup would reach the network too.
    def tripwire(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a unit test looked a name up: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", tripwire)


def error_of(result: ToolResult) -> tuple[str, str]:
    assert result.error is not None, f"expected an error, got {result.output!r}"
    return result.error.code, result.error.message


# --- The module shape ---------------------------------------------------------------------------


@pytest.mark.parametrize("tool", TOOLS, ids=lambda m: m.NAME)
def test_every_tool_exports_the_builtin_shape(tool: ModuleType) -> None:
    assert tool.__name__.rsplit(".", 1)[1] == tool.NAME
    assert isinstance(tool.DESCRIPTION, str) and tool.DESCRIPTION
    assert isinstance(tool.READ_ONLY, bool)
    assert tool.EFFECT in ("none", "idempotent", "undeclared")
    assert tool.KEY_FIELDS == []
    assert issubclass(tool.Config, BaseModel)
    tool.Config()  # every config has defaults: an agent can add the tool with no config
    parameters = inspect.signature(tool.run).parameters
    assert list(parameters) == ["arguments", "scope", "settings", "config"]
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in ("scope", "settings"))


@pytest.mark.parametrize(
    ("tool", "read_only", "effect"),
    [
        (http_request, False, "undeclared"),
        (code_execute, False, "undeclared"),
        (web_search, True, "none"),
        (web_scrape, True, "none"),
    ],
    ids=lambda v: getattr(v, "NAME", str(v)),
)
def test_declared_effects(tool: ModuleType, read_only: bool, effect: str) -> None:
    assert (read_only, effect) == (tool.READ_ONLY, tool.EFFECT)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda m: m.NAME)
def test_input_schemas_are_valid_json_schema_objects(tool: ModuleType) -> None:
    Draft202012Validator.check_schema(tool.INPUT_SCHEMA)
    assert tool.INPUT_SCHEMA["type"] == "object"
    assert tool.INPUT_SCHEMA["additionalProperties"] is False
    json.dumps(tool.INPUT_SCHEMA)  # it goes to the model as JSON


@pytest.mark.parametrize("tool", TOOLS, ids=lambda m: m.NAME)
def test_the_scripted_model_can_call_every_tool(tool: ModuleType) -> None:
    # The scripted model calls each tool with example arguments: they must pass the tool's own check.
    arguments = example_arguments(tool.INPUT_SCHEMA)

    assert _provider.invalid_arguments(tool.INPUT_SCHEMA, arguments) is None


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        (http_request, {"method": "GET"}, "(arguments): 'url' is a required property"),
        (http_request, {"method": "TRACE", "url": "https://example.com"}, "method: 'TRACE' is not one of"),
        (code_execute, {"language": "ruby", "code": "puts 1"}, "language: 'ruby' is not one of"),
        (code_execute, {"language": "python", "code": "1", "timeout_seconds": 121}, "timeout_seconds: 121"),
        (code_execute, {"language": "python", "code": "1", "timeout_seconds": 0}, "timeout_seconds: 0"),
        (web_search, {"query": "x", "num_results": 11}, "num_results: 11 is greater than the maximum of 10"),
        (web_search, {"query": "x", "search_type": "fast"}, "search_type: 'fast' is not one of"),
        (web_search, {"query": "x", "content_mode": "text"}, "content_mode: 'text' is not one of"),
        (web_scrape, {"url": "https://example.com", "formats": []}, "formats: [] should be non-empty"),
        (web_scrape, {"url": "https://example.com", "formats": ["pdf"]}, "formats/0: 'pdf' is not one of"),
        (web_scrape, {"url": "https://example.com", "mobile": True}, "Additional properties"),
    ],
)
def test_arguments_breaking_the_schema_are_refused_before_anything_else(
    tool: ModuleType, arguments: dict[str, Any], message: str
) -> None:
    result = run_builtin(tool.NAME, arguments, scope=SCOPE, settings=NO_SETTINGS, config=tool.Config())

    code, text = error_of(result)
    assert code == "invalid_arguments"
    assert message in text


# --- Caps and provider failures -----------------------------------------------------------------


def test_cap_keeps_short_text_and_marks_a_cut() -> None:
    assert _provider.cap("abc", 3) == "abc"
    assert _provider.cap("abcdef", 4) == "abcd\n…[truncated: 2 of 6 characters omitted]"


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, "rate_limited"),
        (401, "provider_auth"),
        (403, "provider_auth"),
        (408, "timeout"),
        (500, "provider_error"),
        (502, "provider_error"),
        (503, "provider_error"),
        (302, "provider_error"),
        (400, "provider_rejected"),
        (402, "provider_rejected"),
        (404, "provider_rejected"),
        (422, "provider_rejected"),
    ],
)
def test_provider_statuses_map_to_distinct_codes(status: int, code: str) -> None:
    result = _provider.status_failure("Exa", status, '{"error": "nope"}')

    assert error_of(result)[0] == code


def test_a_rate_limit_says_when_to_retry() -> None:
    result = _provider.status_failure("Exa", 429, "", retry_after="7")

    assert error_of(result) == ("rate_limited", "Exa is rate limiting requests (retry after 7 seconds)")


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ('{"error": "Invalid API key"}', "Invalid API key"),
        ('{"success": false, "error": "Payment required"}', "Payment required"),
        ('{"error": {"message": "bad query"}}', "bad query"),
        ('{"detail": "quota"}', "quota"),
        ("upstream exploded", "upstream exploded"),
    ],
)
def test_the_providers_own_message_is_quoted(body: str, detail: str) -> None:
    assert _provider.error_detail(body) == detail


def test_a_huge_provider_message_is_capped() -> None:
    detail = _provider.error_detail("x" * 10_000)

    assert len(detail) < _provider.ERROR_DETAIL_LIMIT + 100
    assert "…[truncated" in detail


# --- http_request -------------------------------------------------------------------------------


def test_a_json_object_body_is_sent_as_json() -> None:
    method, url, headers, content = http_request.build_request(
        http_request.Arguments.model_validate(
            {"method": "POST", "url": "https://api.example.com/items?x=1", "body": {"name": "Olá", "n": 2}}
        )
    )

    assert (method, str(url)) == ("POST", "https://api.example.com/items?x=1")
    assert content is not None and json.loads(content) == {"name": "Olá", "n": 2}
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == "stepwise/0.1"


def test_a_string_body_is_sent_as_it_is_with_the_models_headers() -> None:
    _, _, headers, content = http_request.build_request(
        http_request.Arguments.model_validate(
            {
                "method": "PUT",
                "url": "https://api.example.com/doc",
                "headers": {"Content-Type": "text/csv", "Authorization": "Bearer abc", "User-Agent": "bot"},
                "body": "a,b\n1,2",
            }
        )
    )

    assert content == b"a,b\n1,2"
    assert (headers["content-type"], headers["authorization"], headers["user-agent"]) == (
        "text/csv",
        "Bearer abc",
        "bot",
    )


def test_the_models_content_type_wins_for_a_json_body() -> None:
    _, _, headers, _ = http_request.build_request(
        http_request.Arguments.model_validate(
            {
                "method": "POST",
                "url": "https://x.example",
                "headers": {"content-type": "application/merge-patch+json"},
                "body": {},
            }
        )
    )

    assert headers.get_list("content-type") == ["application/merge-patch+json"]


def test_framing_headers_stay_with_the_client() -> None:
    _, _, headers, content = http_request.build_request(
        http_request.Arguments.model_validate(
            {
                "method": "GET",
                "url": "https://x.example",
                "headers": {"Host": "169.254.169.254", "Content-Length": "999", "Accept": "text/html"},
            }
        )
    )

    assert "host" not in headers and "content-length" not in headers
    assert headers["accept"] == "text/html"
    assert content is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"method": "GET", "url": "example.com/path"}, "url: must be an absolute http or https URL"),
        ({"method": "GET", "url": "ftp://example.com/"}, "url: must be an absolute http or https URL"),
        ({"method": "GET", "url": "https://x.example", "headers": {"X-Name": "José"}}, "printable ASCII"),
        ({"method": "GET", "url": "https://x.example", "headers": {"X-A": "1\r\nX-B: 2"}}, "on one line"),
        ({"method": "GET", "url": "https://x.example", "headers": {"X A": "1"}}, "not a valid header name"),
        ({"method": "POST", "url": "https://x.example", "body": {"n": float("nan")}}, "plain JSON"),
    ],
)
def test_requests_the_schema_cannot_rule_out_are_argument_errors(
    arguments: dict[str, Any], message: str
) -> None:
    result = run_builtin(
        http_request.NAME, arguments, scope=SCOPE, settings=NO_SETTINGS, config=http_request.Config()
    )

    code, text = error_of(result)
    assert code == "invalid_arguments"
    assert message in text


def test_the_method_may_be_written_in_lower_case() -> None:
    # Accepted by the schema once upper-cased; it then reaches the guard, which refuses loopback.
    result = run_builtin(
        http_request.NAME,
        {"method": "get", "url": "http://127.0.0.1:9/"},
        scope=SCOPE,
        settings=NO_SETTINGS,
        config=http_request.Config(),
    )

    assert error_of(result)[0] == "blocked_destination"


@pytest.mark.parametrize("url", INTERNAL_URLS)
def test_http_request_refuses_internal_destinations_without_a_socket(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS", raising=False)

    result = run_builtin(
        http_request.NAME,
        {"method": "GET", "url": url},
        scope=SCOPE,
        settings=NO_SETTINGS,
        config=http_request.Config(),
    )

    code, message = error_of(result)
    assert code == "blocked_destination"
    assert "not allowed" in message


def test_hosts_outside_the_agents_list_are_refused_before_any_lookup() -> None:
    config = http_request.Config(allowed_hosts=["API.Example.com."])

    result = run_builtin(
        http_request.NAME,
        {"method": "GET", "url": "https://evil.example/"},
        scope=SCOPE,
        settings=NO_SETTINGS,
        config=config,
    )

    assert config.allowed_hosts == ["api.example.com"]
    assert error_of(result) == (
        "host_not_allowed",
        "host 'evil.example' is not one this agent may request (allowed: api.example.com)",
    )


@pytest.mark.parametrize(
    "entry", ["https://api.example.com", "api.example.com:443", "api.example.com/v1", ""]
)
def test_allowed_hosts_are_bare_hostnames(entry: str) -> None:
    with pytest.raises(ValidationError, match="is not a hostname"):
        http_request.Config(allowed_hosts=[entry])


def test_configs_refuse_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        http_request.Config.model_validate({"allowed_host": ["x"]})
    with pytest.raises(ValidationError):
        web_search.Config.model_validate({"search_type": "fast"})


# --- code_execute -------------------------------------------------------------------------------


def test_the_sandbox_request_carries_the_documented_fields_with_the_default_timeout() -> None:
    assert code_execute.sandbox_request(code_execute.Arguments(language="python", code="print(1)")) == {
        "language": "python",
        "code": "print(1)",
        "timeout_seconds": 30,
    }
    assert code_execute.sandbox_request(
        code_execute.Arguments(language="javascript", code="1", timeout_seconds=120)
    ) == {
        "language": "javascript",
        "code": "1",
        "timeout_seconds": 120,
    }


@pytest.mark.parametrize("settings", [{}, {"CODE_SANDBOX_URL": "  "}, {"CODE_SANDBOX_API_KEY": "k"}])
def test_without_a_sandbox_url_the_tool_says_it_is_not_configured(settings: dict[str, str]) -> None:
    result = run_builtin(
        code_execute.NAME,
        {"language": "python", "code": "print(1)"},
        scope=SCOPE,
        settings=StaticSettings(settings),
        config=code_execute.Config(),
    )

    assert error_of(result) == ("not_configured", "Code sandbox is not configured")


def test_sandbox_output_is_mapped_and_each_stream_capped() -> None:
    limit = code_execute.OUTPUT_LIMIT
    result = code_execute.sandbox_result(
        {"stdout": "o" * (limit + 5), "stderr": "boom", "exit_code": 1, "duration_ms": 12, "extra": True}
    )

    assert result.output == {
        "stdout": "o" * limit + f"\n…[truncated: 5 of {limit + 5} characters omitted]",
        "stderr": "boom",
        "exit_code": 1,
        "duration_ms": 12,
        "timed_out": False,
    }


@pytest.mark.parametrize("answer", [{"stdout": "x"}, {"exit_code": "zero"}, ["not", "an", "object"]])
def test_a_sandbox_answer_of_another_shape_is_a_provider_error(answer: Any) -> None:
    code, message = error_of(code_execute.sandbox_result(answer))

    assert code == "provider_error"
    assert "unexpected shape" in message


@pytest.mark.parametrize("url", INTERNAL_URLS)
def test_an_internal_sandbox_url_is_refused_without_a_socket(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS", raising=False)

    result = run_builtin(
        code_execute.NAME,
        {"language": "python", "code": "print(1)"},
        scope=SCOPE,
        settings=StaticSettings({"CODE_SANDBOX_URL": url}),
        config=code_execute.Config(),
    )

    assert error_of(result)[0] == "blocked_destination"


# --- web_search ---------------------------------------------------------------------------------


def test_a_minimal_search_asks_exa_for_highlights() -> None:
    assert web_search.exa_request(web_search.Arguments(query="vector databases")) == {
        "query": "vector databases",
        "type": "auto",
        "numResults": 5,
        "contents": {"highlights": {"maxCharacters": 2_000}},
    }


def test_every_search_argument_maps_to_exas_field() -> None:
    payload = web_search.exa_request(
        web_search.Arguments.model_validate(
            {
                "query": "battery policy",
                "search_type": "deep-reasoning",
                "num_results": 10,
                "include_domains": ["europa.eu"],
                "exclude_domains": ["example.com"],
                "start_date": "2024-01-01",
                "end_date": "2024-12-31T23:59:59Z",
                "category": "news",
                "content_mode": "full_text",
            }
        )
    )

    assert payload == {
        "query": "battery policy",
        "type": "deep-reasoning",
        "numResults": 10,
        "includeDomains": ["europa.eu"],
        "excludeDomains": ["example.com"],
        "startPublishedDate": "2024-01-01",
        "endPublishedDate": "2024-12-31T23:59:59Z",
        "category": "news",
        "contents": {"text": {"maxCharacters": 5_000}},
    }


def test_compact_text_asks_for_a_thousand_characters_a_result() -> None:
    payload = web_search.exa_request(web_search.Arguments(query="q", content_mode="compact_text"))

    assert payload["contents"] == {"text": {"maxCharacters": 1_000}}


def test_empty_filters_are_left_out() -> None:
    payload = web_search.exa_request(web_search.Arguments(query="q", include_domains=[], category=None))

    assert "includeDomains" not in payload and "category" not in payload


@pytest.mark.parametrize("value", ["yesterday", "2024-13-01", "31/01/2024"])
def test_dates_must_be_iso_8601(value: str) -> None:
    result = run_builtin(
        web_search.NAME,
        {"query": "q", "start_date": value},
        scope=SCOPE,
        settings=StaticSettings({"EXA_API_KEY": "k"}),
        config=web_search.Config(),
    )

    code, message = error_of(result)
    assert code == "invalid_arguments"
    assert message.startswith(f"start_date: {value!r} is not an ISO 8601 date")


def test_without_an_exa_key_the_error_names_the_setting() -> None:
    result = run_builtin(
        web_search.NAME, {"query": "q"}, scope=SCOPE, settings=NO_SETTINGS, config=web_search.Config()
    )

    assert error_of(result) == (
        "not_configured",
        "web_search needs the EXA_API_KEY setting: set it with PUT /v1/settings/EXA_API_KEY",
    )


def test_an_internal_exa_base_url_is_refused_without_a_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXA_BASE_URL", "http://169.254.169.254")
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS", raising=False)

    result = run_builtin(
        web_search.NAME,
        {"query": "q"},
        scope=SCOPE,
        settings=StaticSettings({"EXA_API_KEY": "k"}),
        config=web_search.Config(),
    )

    assert error_of(result)[0] == "blocked_destination"


def test_a_key_that_cannot_be_a_header_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXA_BASE_URL", "https://93.184.216.34")

    result = run_builtin(
        web_search.NAME,
        {"query": "q"},
        scope=SCOPE,
        settings=StaticSettings({"EXA_API_KEY": "clé"}),
        config=web_search.Config(),
    )

    assert error_of(result) == ("not_configured", "Exa: a key or setting sent in a header is not ASCII")


def exa_result(index: int, **content: Any) -> dict[str, Any]:
    return {
        "id": f"https://site{index}.example/",
        "url": f"https://site{index}.example/",
        "title": f"Result {index}",
        "publishedDate": "2024-05-01T00:00:00.000Z",
        "author": "Ana",
        "score": 0.5,
        **content,
    }


def test_results_keep_metadata_and_the_content_of_the_mode() -> None:
    answer = {
        "requestId": "r1",
        "resolvedSearchType": "neural",
        "results": [exa_result(1, highlights=["one", "two"], highlightScores=[0.9, 0.8], text="unused")],
        "costDollars": {"total": 0.007},
    }

    result = web_search.search_result(answer, "highlights", "auto")

    assert result.output == {
        "search_type": "neural",
        "results": [
            {
                "title": "Result 1",
                "url": "https://site1.example/",
                "published_date": "2024-05-01T00:00:00.000Z",
                "author": "Ana",
                "highlights": ["one", "two"],
            }
        ],
    }


@pytest.mark.parametrize(("mode", "limit"), [("compact_text", 1_000), ("full_text", 5_000)])
def test_page_text_is_capped_per_result_with_a_marker(mode: str, limit: int) -> None:
    answer = {"results": [exa_result(1, text="t" * (limit * 3))]}

    [item] = web_search.search_result(answer, mode, "auto").output["results"]

    assert item["text"] == "t" * limit + f"\n…[truncated: {limit * 2} of {limit * 3} characters omitted]"


def test_highlights_are_capped_per_result_with_a_marker() -> None:
    highlights = ["a" * 1_500, "b" * 1_500, "c" * 10]

    capped = web_search.cap_highlights(highlights, 2_000)

    assert capped[0] == "a" * 1_500
    assert capped[1].startswith("b" * 500 + "\n…[truncated: 1000 of 1500")
    assert capped[2] == "…[1 more highlight(s) omitted]"


def test_the_whole_result_stays_under_the_modes_cap_by_dropping_results() -> None:
    answer = {"results": [exa_result(i, text="t" * 9_000) for i in range(10)]}

    output = web_search.search_result(answer, "full_text", "auto").output

    assert len(json.dumps(output, ensure_ascii=False)) <= web_search.MODE_CAPS["full_text"].total
    assert len(output["results"]) == 9  # ~5,200 characters each
    assert output["omitted"] == "…[1 more result(s) omitted: the 50,000-character cap for full_text]"


@pytest.mark.parametrize("answer", [{}, {"results": "none"}, []])
def test_an_exa_answer_without_results_is_a_provider_error(answer: Any) -> None:
    assert error_of(web_search.search_result(answer, "highlights", "auto"))[0] == "provider_error"


# --- web_scrape ---------------------------------------------------------------------------------


def test_the_scrape_request_defaults_to_markdown_of_the_main_content() -> None:
    assert web_scrape.firecrawl_request(web_scrape.Arguments(url="https://example.com/a")) == {
        "url": "https://example.com/a",
        "formats": ["markdown"],
        "onlyMainContent": True,
        "timeout": 30_000,
    }
    formats = web_scrape.firecrawl_request(
        web_scrape.Arguments(url="https://x.example", formats=["links", "html"])
    )["formats"]
    assert formats == ["links", "html"]


@pytest.mark.parametrize("url", INTERNAL_URLS)
def test_an_internal_page_is_refused_before_firecrawl_is_asked(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STEPWISE_ALLOW_HOSTS", raising=False)

    result = run_builtin(
        web_scrape.NAME,
        {"url": url},
        scope=SCOPE,
        settings=StaticSettings({"FIRECRAWL_API_KEY": "k"}),
        config=web_scrape.Config(),
    )

    assert error_of(result)[0] == "blocked_destination"


def test_a_page_url_that_is_not_http_is_an_argument_error() -> None:
    result = run_builtin(
        web_scrape.NAME,
        {"url": "file:///etc/passwd"},
        scope=SCOPE,
        settings=NO_SETTINGS,
        config=web_scrape.Config(),
    )

    assert error_of(result) == ("invalid_arguments", "url: must be an absolute http or https URL")


def test_without_a_firecrawl_key_the_error_names_the_setting() -> None:
    result = run_builtin(
        web_scrape.NAME,
        {"url": "https://93.184.216.34/"},
        scope=SCOPE,
        settings=NO_SETTINGS,
        config=web_scrape.Config(),
    )

    assert error_of(result) == (
        "not_configured",
        "web_scrape needs the FIRECRAWL_API_KEY setting: set it with PUT /v1/settings/FIRECRAWL_API_KEY",
    )


PAGE = (
    "# Title\n\n![Logo](https://cdn.example/logo.png) Intro [![badge](https://cdn.example/b.svg)](/home)\n"
    '![chart](https://cdn.example/chart.png "A chart") ![](data:image/png;base64,AAAA)\n'
    "![Logo again](https://cdn.example/logo.png)"
)


def test_without_images_image_tags_become_their_alt_text() -> None:
    assert web_scrape.drop_images(PAGE) == "# Title\n\nLogo Intro [badge](/home)\nchart \nLogo again"


def test_with_images_tags_stay_except_inline_data_and_urls_are_listed() -> None:
    assert "(inline image omitted)" in web_scrape.keep_images(PAGE)
    assert "base64" not in web_scrape.keep_images(PAGE)
    assert web_scrape.image_urls(PAGE) == [
        {"url": "https://cdn.example/logo.png", "alt": "Logo"},
        {"url": "https://cdn.example/b.svg", "alt": "badge"},
        {"url": "https://cdn.example/chart.png", "alt": "chart"},
    ]


def test_a_scrape_result_maps_metadata_and_formats() -> None:
    answer = {
        "success": True,
        "data": {
            "markdown": PAGE,
            "html": "<h1>Title</h1>",
            "links": ["https://example.com/a", "https://example.com/b"],
            "metadata": {"title": "Example", "sourceURL": "https://example.com/", "statusCode": 200},
        },
    }
    arguments = web_scrape.Arguments(url="https://example.com", formats=["markdown", "html", "links"])

    output = web_scrape.scrape_result(answer, arguments).output

    assert output == {
        "url": "https://example.com/",
        "title": "Example",
        "status_code": 200,
        "markdown": web_scrape.drop_images(PAGE),
        "html": "<h1>Title</h1>",
        "links": ["https://example.com/a", "https://example.com/b"],
    }


def test_the_content_cap_is_shared_by_the_formats_in_order() -> None:
    limit = web_scrape.CONTENT_LIMIT
    answer = {
        "success": True,
        "data": {"markdown": "m" * (limit - 10), "html": "h" * 50, "links": ["https://x.example/1"] * 3},
    }
    arguments = web_scrape.Arguments(url="https://x.example", formats=["markdown", "html", "links"])

    output = web_scrape.scrape_result(answer, arguments).output

    assert output["markdown"] == "m" * (limit - 10)
    assert output["html"] == "h" * 10 + "\n…[truncated: 40 of 50 characters omitted]"
    assert output["links"] == []
    assert output["links_omitted"] == "…[3 more link(s) omitted: the 200,000-character cap]"


def test_markdown_past_the_cap_is_cut_with_a_marker() -> None:
    limit = web_scrape.CONTENT_LIMIT
    answer = {"success": True, "data": {"markdown": "m" * (limit + 1)}}

    output = web_scrape.scrape_result(answer, web_scrape.Arguments(url="https://x.example")).output

    assert output["markdown"].endswith(f"\n…[truncated: 1 of {limit + 1} characters omitted]")


@pytest.mark.parametrize(
    "answer", [{"success": False, "error": "All scraping engines failed."}, {"success": True}, "text"]
)
def test_a_failed_or_empty_scrape_is_a_provider_error(answer: Any) -> None:
    assert (
        error_of(web_scrape.scrape_result(answer, web_scrape.Arguments(url="https://x.example")))[0]
        == "provider_error"
    )


def test_http_requests_marker_is_the_custom_tools() -> None:
    # One cap and one marker for every tool reading an arbitrary HTTP response.
    assert http_request.RESPONSE_LIMIT == HTTP_READ_LIMIT == 5 * 1024 * 1024
    assert "5,242,880 bytes" in TRUNCATION_MARKER
    assert "5 MiB" in http_request.DESCRIPTION

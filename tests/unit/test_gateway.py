"""The local API Gateway: events in, responses out, with no sockets."""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from stepwise_local.gateway import MAX_BODY_BYTES, Gateway, Response, Route

Handler = Callable[[dict[str, Any]], Any]


class FakeLambdas:
    """In-process functions by logical id, recording every invocation."""

    def __init__(self, **functions: Handler) -> None:
        self.functions = functions
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, event: dict[str, Any]) -> Any:
        self.calls.append((name, event))
        return self.functions[name](event)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [event for called, event in self.calls if called == name]


def ok(event: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": 200, "body": "ok"}


def allow(context: dict[str, Any] | None = None) -> Handler:
    return lambda event: {"isAuthorized": True, "context": context or {"tenant": "t1"}}


ROUTES = [
    Route("GET", "/v1/health", "Api", authorized=False),
    Route("GET", "/v1/agents", "Api", authorized=True),
    Route("POST", "/v1/agents", "Api", authorized=True),
    Route("GET", "/v1/agents/{agent_id}", "Api", authorized=True),
    Route("GET", "/v1/agents/{agent_id}/tools", "Api", authorized=True),
]


def make(
    routes: list[Route] | None = None, authorizer: Handler | None = None, **options: Any
) -> tuple[Gateway, FakeLambdas]:
    lambdas = FakeLambdas(Api=ok, Other=ok, Authorizer=authorizer or allow())
    gateway = Gateway(routes or ROUTES, lambdas, authorizer="Authorizer", **options)
    return gateway, lambdas


def call(
    gateway: Gateway,
    method: str,
    target: str,
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    token: str | None = "Bearer sk-1",
) -> Response:
    path, _, query = target.partition("?")
    base = [("Host", "127.0.0.1:3000")] + ([("Authorization", token)] if token is not None else [])
    return gateway.handle(method, path, query, base + (headers or []), body, source_ip="10.0.0.7")


def message(response: Response) -> str:
    assert response.header("content-type") == "application/json"
    return str(json.loads(response.body)["message"])


# --- the integration event -------------------------------------------------------------------------


def test_event_carries_the_request_as_payload_format_2() -> None:
    gateway, lambdas = make()

    call(
        gateway,
        "GET",
        "/v1/agents/ag%20one/tools?x=1&x=2&y=a%2Fb&flag",
        headers=[
            ("User-Agent", "pytest"),
            ("X-Multi", "a"),
            ("x-multi", "b"),
            ("Cookie", "session=abc; theme=dark"),
        ],
    )

    [event] = lambdas.events("Api")
    assert event["version"] == "2.0"
    assert event["routeKey"] == "GET /v1/agents/{agent_id}/tools"
    assert event["rawPath"] == "/v1/agents/ag one/tools"
    assert event["rawQueryString"] == "x=1&x=2&y=a%2Fb&flag"
    assert event["pathParameters"] == {"agent_id": "ag one"}
    assert event["queryStringParameters"] == {"x": "1,2", "y": "a/b", "flag": ""}
    assert event["cookies"] == ["session=abc", "theme=dark"]
    headers = event["headers"]
    assert all(name == name.lower() for name in headers)
    assert headers["x-multi"] == "a,b"
    assert headers["user-agent"] == "pytest"
    assert headers["authorization"] == "Bearer sk-1"
    assert headers["x-forwarded-for"] == "10.0.0.7"
    assert headers["x-forwarded-port"] == "3000"
    assert "cookie" not in headers
    assert event["isBase64Encoded"] is False
    assert "body" not in event


def test_request_context_describes_the_call() -> None:
    gateway, lambdas = make()

    call(gateway, "GET", "/v1/agents/a1", headers=[("User-Agent", "pytest")])

    [event] = lambdas.events("Api")
    context = event["requestContext"]
    assert context["accountId"] == "123456789012"
    assert context["apiId"] == "local"
    assert context["domainName"] == "127.0.0.1:3000"
    assert context["stage"] == "$default"
    assert context["routeKey"] == "GET /v1/agents/{agent_id}"
    assert context["http"] == {
        "method": "GET",
        "path": "/v1/agents/a1",
        "protocol": "HTTP/1.1",
        "sourceIp": "10.0.0.7",
        "userAgent": "pytest",
    }
    assert uuid.UUID(context["requestId"])
    assert re.fullmatch(r"\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d \+0000", context["time"])
    assert isinstance(context["timeEpoch"], int)
    assert context["authorizer"] == {"lambda": {"tenant": "t1"}}


def test_optional_fields_are_omitted_when_empty() -> None:
    gateway, lambdas = make()

    call(gateway, "GET", "/v1/agents")

    [event] = lambdas.events("Api")
    assert {"queryStringParameters", "pathParameters", "cookies", "body"}.isdisjoint(event)
    assert event["rawQueryString"] == ""


@pytest.mark.parametrize(
    ("content_type", "body", "encoded"),
    [
        ("application/json", b'{"name": "a"}', False),
        ("application/json; charset=utf-8", '{"name": "é"}'.encode(), False),
        ("text/plain", b"hello", False),
        ("application/vnd.api+json", b"{}", False),
        ("application/octet-stream", b"\x00\x01\xff", True),
        ("application/x-www-form-urlencoded", b"decision=approve", True),
        ("text/plain", b"\xff\xfe not utf-8", True),
    ],
)
def test_body_is_text_or_base64_like_http_api(content_type: str, body: bytes, encoded: bool) -> None:
    gateway, lambdas = make()

    call(gateway, "POST", "/v1/agents", headers=[("Content-Type", content_type)], body=body)

    [event] = lambdas.events("Api")
    assert event["isBase64Encoded"] is encoded
    received = base64.b64decode(event["body"]) if encoded else event["body"].encode()
    assert received == body


# --- routing ----------------------------------------------------------------------------------------


def test_most_specific_route_wins() -> None:
    routes = [
        Route("GET", "/pets/dog/1", "Exact", authorized=False),
        Route("GET", "/pets/dog/{id}", "Param", authorized=False),
        Route("GET", "/pets/{proxy+}", "Greedy", authorized=False),
        Route("ANY", "/{proxy+}", "Any", authorized=False),
        Route("ANY", "$default", "Default", authorized=False),
    ]
    names = ["Exact", "Param", "Greedy", "Any", "Default"]
    lambdas = FakeLambdas(**{name: ok for name in names})
    gateway = Gateway(routes, lambdas, authorizer=None)

    for method, target in [
        ("GET", "/pets/dog/1"),
        ("GET", "/pets/dog/2"),
        ("GET", "/pets/cat/1/photos"),
        ("POST", "/pets/dog/1"),
        ("GET", "/"),
    ]:
        call(gateway, method, target)

    assert [name for name, _ in lambdas.calls] == names
    greedy, anything, default = (lambdas.events(n)[0] for n in ("Greedy", "Any", "Default"))
    assert greedy["pathParameters"] == {"proxy": "cat/1/photos"}
    assert anything["routeKey"] == "ANY /{proxy+}"
    assert anything["pathParameters"] == {"proxy": "pets/dog/1"}
    assert default["routeKey"] == "$default"


def test_a_method_route_beats_any_on_the_same_path() -> None:
    routes = [Route("ANY", "/items", "Other", authorized=False), Route("GET", "/items", "Api", False)]
    gateway, lambdas = make(routes)

    call(gateway, "GET", "/items")
    call(gateway, "DELETE", "/items")

    assert [name for name, _ in lambdas.calls] == ["Api", "Other"]


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("DELETE", "/v1/agents"),
        ("GET", "/v1/nothing"),
        ("GET", "/v1/agents/a1/extra/x"),
        ("GET", "/v1/agents/"),
    ],
)
def test_no_route_is_404_without_invoking_anything(method: str, target: str) -> None:
    gateway, lambdas = make()

    response = call(gateway, method, target)

    assert response.status == 404
    assert message(response) == "Not Found"
    assert lambdas.calls == []


def test_an_encoded_slash_splits_the_path_like_http_api() -> None:
    gateway, lambdas = make()

    response = call(gateway, "GET", "/v1/agents/a%2Fb")

    assert response.status == 404
    assert lambdas.calls == []


@pytest.mark.parametrize(
    "routes",
    [
        [Route("GET", "/a", "Api", False), Route("GET", "/a", "Other", False)],
        [Route("GET", "/a/{proxy+}/b", "Api", False)],
        [Route("GET", "/a/x{id}", "Api", False)],
        [Route("FETCH", "/a", "Api", False)],
    ],
)
def test_invalid_route_tables_fail_fast(routes: list[Route]) -> None:
    with pytest.raises(ValueError):
        Gateway(routes, FakeLambdas(), authorizer=None)


# --- the authorizer -----------------------------------------------------------------------------


def test_missing_identity_is_401_without_invoking_anything() -> None:
    gateway, lambdas = make()

    response = call(gateway, "GET", "/v1/agents", token=None)
    empty = call(gateway, "GET", "/v1/agents", token="")

    assert (response.status, empty.status) == (401, 401)
    assert message(response) == "Unauthorized"
    assert lambdas.calls == []


def test_authorizer_event_is_a_request_payload_2() -> None:
    gateway, lambdas = make()

    call(gateway, "GET", "/v1/agents/a1?x=1", headers=[("Cookie", "c=1")])

    [event] = lambdas.events("Authorizer")
    assert event["version"] == "2.0"
    assert event["type"] == "REQUEST"
    assert event["routeArn"] == "arn:aws:execute-api:us-east-1:123456789012:local/$default/GET/v1/agents/a1"
    assert event["identitySource"] == ["Bearer sk-1"]
    assert event["routeKey"] == "GET /v1/agents/{agent_id}"
    assert event["rawPath"] == "/v1/agents/a1"
    assert event["rawQueryString"] == "x=1"
    assert event["queryStringParameters"] == {"x": "1"}
    assert event["pathParameters"] == {"agent_id": "a1"}
    assert event["cookies"] == ["c=1"]
    assert event["headers"]["authorization"] == "Bearer sk-1"
    assert "authorizer" not in event["requestContext"]
    assert "body" not in event


def test_authorizer_context_reaches_the_function() -> None:
    context = {"tenant": "acme", "scopes": ["a", "b"], "n": 1}
    gateway, lambdas = make(authorizer=allow(context))

    response = call(gateway, "GET", "/v1/agents")

    assert response.status == 200
    assert lambdas.events("Api")[0]["requestContext"]["authorizer"] == {"lambda": context}


def test_a_denial_is_403_and_the_function_never_runs() -> None:
    gateway, lambdas = make(authorizer=lambda event: {"isAuthorized": False})

    response = call(gateway, "GET", "/v1/agents")

    assert response.status == 403
    assert message(response) == "Forbidden"
    assert lambdas.events("Api") == []


def failing(event: dict[str, Any]) -> Any:
    raise RuntimeError("authorizer bug")


@pytest.mark.parametrize(
    "authorizer",
    [
        failing,
        lambda event: {"isAuthorized": "true"},
        lambda event: {"allowed": True},
        lambda event: {"isAuthorized": True, "context": "tenant"},
        lambda event: True,
    ],
)
def test_a_broken_authorizer_is_500(authorizer: Handler) -> None:
    gateway, lambdas = make(authorizer=authorizer)

    response = call(gateway, "GET", "/v1/agents")

    assert response.status == 500
    assert message(response) == "Internal Server Error"
    assert lambdas.events("Api") == []


def test_open_routes_skip_the_authorizer() -> None:
    gateway, lambdas = make()

    response = call(gateway, "GET", "/v1/health", token=None)

    assert response.status == 200
    assert [name for name, _ in lambdas.calls] == ["Api"]
    assert "authorizer" not in lambdas.calls[0][1]["requestContext"]


def test_without_an_authorizer_every_route_is_open() -> None:
    lambdas = FakeLambdas(Api=ok)
    gateway = Gateway(ROUTES, lambdas, authorizer=None)

    response = call(gateway, "GET", "/v1/agents", token=None)

    assert response.status == 200


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_authorizer_results_are_cached_per_identity_for_the_ttl() -> None:
    clock = Clock()
    gateway, lambdas = make(clock=clock)

    call(gateway, "GET", "/v1/agents")
    call(gateway, "GET", "/v1/agents/a1")  # another route, same identity: cached
    call(gateway, "GET", "/v1/agents", token="Bearer sk-2")
    clock.now += 299
    call(gateway, "GET", "/v1/agents")
    clock.now += 2
    call(gateway, "GET", "/v1/agents")

    identities = [e["identitySource"] for e in lambdas.events("Authorizer")]
    assert identities == [["Bearer sk-1"], ["Bearer sk-2"], ["Bearer sk-1"]]
    assert len(lambdas.events("Api")) == 5


def test_denials_are_cached_too() -> None:
    gateway, lambdas = make(authorizer=lambda event: {"isAuthorized": False})

    statuses = [call(gateway, "GET", "/v1/agents").status for _ in range(3)]

    assert statuses == [403, 403, 403]
    assert len(lambdas.events("Authorizer")) == 1


def test_ttl_zero_disables_the_cache_and_errors_are_never_cached() -> None:
    gateway, lambdas = make(authorizer_ttl=0)
    call(gateway, "GET", "/v1/agents")
    call(gateway, "GET", "/v1/agents")

    outcomes = iter([RuntimeError("flaky"), {"isAuthorized": True}])

    def flaky(event: dict[str, Any]) -> Any:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    cached, cached_lambdas = make(authorizer=flaky)
    first, second = call(cached, "GET", "/v1/agents"), call(cached, "GET", "/v1/agents")

    assert len(lambdas.events("Authorizer")) == 2
    assert (first.status, second.status) == (500, 200)
    assert len(cached_lambdas.events("Authorizer")) == 2


def test_a_function_cannot_alter_the_cached_context() -> None:
    seen: list[dict[str, Any]] = []

    def meddle(event: dict[str, Any]) -> Any:
        context = event["requestContext"]["authorizer"]["lambda"]
        seen.append(dict(context))
        context["tenant"] = "evil"
        return {"statusCode": 200}

    gateway, lambdas = make()
    lambdas.functions["Api"] = meddle

    call(gateway, "GET", "/v1/agents")
    call(gateway, "GET", "/v1/agents")

    assert len(lambdas.events("Authorizer")) == 1
    assert seen == [{"tenant": "t1"}, {"tenant": "t1"}]


# --- limits -----------------------------------------------------------------------------------------


def test_default_body_limit_is_http_apis_10_mb() -> None:
    gateway, _ = make()

    assert gateway.max_body_bytes == MAX_BODY_BYTES == 10 * 1024 * 1024


def test_a_body_over_the_limit_is_413_before_anything_runs() -> None:
    gateway, lambdas = make(max_body_bytes=10)

    at_limit = call(gateway, "POST", "/v1/agents", body=b"x" * 10)
    over = call(gateway, "POST", "/v1/agents", body=b"x" * 11)

    assert at_limit.status == 200
    assert over.status == 413
    assert message(over) == "Request Entity Too Large"
    assert len(lambdas.calls) == 2  # the authorizer and the function, for the request at the limit


# --- the function's result ----------------------------------------------------------------------


def respond(result: Any) -> Response:
    gateway, lambdas = make()
    lambdas.functions["Api"] = lambda event: result
    return call(gateway, "GET", "/v1/health")


@pytest.mark.parametrize(
    ("result", "body"),
    [
        ({"message": "hi"}, {"message": "hi"}),
        ("Hello from Lambda!", "Hello from Lambda!"),
        (42, 42),
        ([1, "a"], [1, "a"]),
        (None, None),
    ],
)
def test_a_result_without_status_code_is_inferred_as_json(result: Any, body: Any) -> None:
    response = respond(result)

    assert response.status == 200
    assert response.header("content-type") == "application/json"
    assert json.loads(response.body) == body


def test_a_full_result_sets_status_headers_cookies_and_body() -> None:
    response = respond(
        {
            "statusCode": 201,
            "headers": {"Content-Type": "text/html", "X-Count": 3, "Content-Length": "999"},
            "multiValueHeaders": {"X-Ignored": ["a", "b"]},
            "cookies": ["a=1; Path=/", "b=2; HttpOnly"],
            "body": "<p>hi</p>",
        }
    )

    assert response.status == 201
    assert response.header("content-type") == "text/html"
    assert response.header("x-count") == "3"
    assert response.header("content-length") is None  # the server writes its own
    assert response.header("x-ignored") is None  # payload 2.0 has no multiValueHeaders
    assert [v for k, v in response.headers if k == "set-cookie"] == ["a=1; Path=/", "b=2; HttpOnly"]
    assert response.header("apigw-requestid")
    assert response.body == b"<p>hi</p>"


def test_a_base64_result_is_decoded() -> None:
    payload = bytes(range(256))

    response = respond(
        {"statusCode": 200, "isBase64Encoded": True, "body": base64.b64encode(payload).decode()}
    )

    assert response.body == payload


def test_a_status_without_body_is_empty() -> None:
    response = respond({"statusCode": 204})

    assert (response.status, response.body) == (204, b"")


@pytest.mark.parametrize(
    "result",
    [
        {"statusCode": "200", "body": "x"},
        {"statusCode": 200, "body": {"not": "a string"}},
        {"statusCode": 200, "isBase64Encoded": True, "body": "not base64!"},
        {"statusCode": 200, "headers": {"X-List": ["a"]}},
        {"statusCode": 200, "cookies": [1]},
        {"when": object()},
    ],
)
def test_a_malformed_result_is_500(result: Any) -> None:
    response = respond(result)

    assert response.status == 500
    assert message(response) == "Internal Server Error"


def test_a_function_exception_is_500_with_the_traceback_logged(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: dict[str, Any]) -> Any:
        raise KeyError("missing thing")

    gateway, lambdas = make()
    lambdas.functions["Api"] = broken

    with caplog.at_level(logging.ERROR, logger="stepwise_local.gateway"):
        response = call(gateway, "GET", "/v1/health")

    assert response.status == 500
    assert message(response) == "Internal Server Error"
    [record] = caplog.records
    assert "Api" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is KeyError


def test_without_identity_sources_the_authorizer_sees_every_request_and_nothing_is_cached() -> None:
    # As API Gateway does for an authorizer without identity sources (template.yaml's), even a
    # request with no Authorization reaches it, and a TTL cannot apply: there is no identity to key on.
    gateway, lambdas = make(identity_headers=(), authorizer_ttl=300)

    first = call(gateway, "GET", "/v1/agents", token=None)
    second = call(gateway, "GET", "/v1/agents", token="Bearer sk-1")
    call(gateway, "GET", "/v1/agents", token="Bearer sk-1")

    assert first.status == second.status == 200
    events = lambdas.events("Authorizer")
    assert len(events) == 3
    assert all("identitySource" not in e for e in events)
    assert events[1]["headers"]["authorization"] == "Bearer sk-1"

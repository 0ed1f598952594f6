"""The local API Gateway over real HTTP on loopback."""

from __future__ import annotations

import base64
import errno
import json
import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from stepwise_local.gateway import Gateway, Route, serve
from tests.eventually import eventually

ROUTES = [
    Route("GET", "/v1/health", "Health", authorized=False),
    Route("ANY", "/v1/echo/{proxy+}", "Echo", authorized=True),
    Route("POST", "/v1/blobs", "Blob", authorized=False),
    Route("GET", "/v1/big", "Big", authorized=False),
    Route("GET", "/v1/boom", "Boom", authorized=False),
]
BIG = 8 * 1024 * 1024
LIMIT = 2 * 1024 * 1024


def echo(event: dict[str, Any]) -> dict[str, Any]:
    return {
        "statusCode": 201,
        "headers": {"content-type": "application/json", "x-route": event["routeKey"]},
        "cookies": ["a=1; Path=/", "b=2; HttpOnly"],
        "body": json.dumps(event),
    }


def blob(event: dict[str, Any]) -> dict[str, Any]:
    data = base64.b64decode(event["body"]) if event["isBase64Encoded"] else event["body"].encode()
    return {
        "statusCode": 200,
        "headers": {"content-type": "application/octet-stream"},
        "isBase64Encoded": True,
        "body": base64.b64encode(data[::-1]).decode(),
    }


def boom(event: dict[str, Any]) -> Any:
    raise RuntimeError("handler bug")


FUNCTIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Health": lambda event: {"status": "ok"},
    "Echo": echo,
    "Blob": blob,
    "Big": lambda event: {"statusCode": 200, "body": "x" * BIG},
    "Boom": boom,
    "Authorizer": lambda event: {
        "isAuthorized": event["identitySource"] == ["Bearer sk-local"],
        "context": {"tenant": "local"},
    },
}


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, name: str, event: dict[str, Any]) -> Any:
        self.calls.append(name)
        return FUNCTIONS[name](event)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def quiet() -> bool:
    return True  # tests that read the request log parametrize this to False


@pytest.fixture
def base_url(recorder: Recorder, quiet: bool) -> Iterator[str]:
    gateway = Gateway(ROUTES, recorder, authorizer="Authorizer", max_body_bytes=LIMIT)
    server = serve(gateway, port=0, quiet=quiet)
    host, port = server.server_address[:2]
    try:
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def client(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=10) as c:
        yield c


AUTH = {"Authorization": "Bearer sk-local"}


def test_a_request_round_trips_through_the_event(client: httpx.Client) -> None:
    response = client.post(
        "/v1/echo/a%20b/c?x=1&x=2", json={"name": "agent"}, headers=AUTH | {"Cookie": "s=1; t=2"}
    )

    assert response.status_code == 201
    assert response.headers["x-route"] == "ANY /v1/echo/{proxy+}"
    assert response.headers.get_list("set-cookie") == ["a=1; Path=/", "b=2; HttpOnly"]
    assert response.headers["content-length"] == str(len(response.content))
    assert response.headers["apigw-requestid"]
    event = response.json()
    assert event["rawPath"] == "/v1/echo/a b/c"
    assert event["pathParameters"] == {"proxy": "a b/c"}
    assert event["queryStringParameters"] == {"x": "1,2"}
    assert event["cookies"] == ["s=1", "t=2"]
    assert json.loads(event["body"]) == {"name": "agent"}
    assert event["isBase64Encoded"] is False
    assert event["requestContext"]["domainName"] == client.base_url.netloc.decode()
    assert event["requestContext"]["http"]["sourceIp"] == "127.0.0.1"
    assert event["requestContext"]["authorizer"] == {"lambda": {"tenant": "local"}}


def test_an_inferred_result_is_json(client: httpx.Client) -> None:
    response = client.get("/v1/health")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"status": "ok"}


def test_the_authorizer_guards_the_wire(client: httpx.Client, recorder: Recorder) -> None:
    missing = client.get("/v1/echo/x")
    wrong = client.get("/v1/echo/x", headers={"Authorization": "Bearer nope"})

    assert (missing.status_code, missing.json()) == (401, {"message": "Unauthorized"})
    assert (wrong.status_code, wrong.json()) == (403, {"message": "Forbidden"})
    assert recorder.calls == ["Authorizer"]


@pytest.mark.parametrize("quiet", [False])
def test_errors_from_the_gateway_itself(client: httpx.Client, capsys: pytest.CaptureFixture[str]) -> None:
    not_found = client.delete("/v1/health")
    failed = client.get("/v1/boom")

    assert (not_found.status_code, not_found.json()) == (404, {"message": "Not Found"})
    assert (failed.status_code, failed.json()) == (500, {"message": "Internal Server Error"})
    assert "DELETE /v1/health 404" in capsys.readouterr().err


def test_a_1_mb_binary_body_round_trips(client: httpx.Client) -> None:
    payload = os.urandom(1024 * 1024)

    response = client.post("/v1/blobs", content=payload, headers={"Content-Type": "application/octet-stream"})

    assert response.status_code == 200
    assert response.content == payload[::-1]


def test_a_chunked_body_is_read_whole(client: httpx.Client) -> None:
    parts = [b"hello ", b"chunked ", b"world"]

    response = client.post("/v1/blobs", content=iter(parts), headers={"Content-Type": "text/plain"})

    assert response.status_code == 200
    assert response.content == b"".join(parts)[::-1]


def test_a_body_over_the_limit_is_413(client: httpx.Client, recorder: Recorder) -> None:
    response = client.post(
        "/v1/blobs", content=b"x" * (LIMIT + 1), headers={"Content-Type": "application/octet-stream"}
    )
    after = client.get("/v1/health")

    assert (response.status_code, response.json()) == (413, {"message": "Request Entity Too Large"})
    assert after.status_code == 200
    assert recorder.calls == ["Health"]


def test_head_follows_http_api_routing_and_sends_no_body(client: httpx.Client) -> None:
    on_any = client.head("/v1/echo/x", headers=AUTH)
    on_get = client.head("/v1/health")

    assert on_any.status_code == 201
    assert int(on_any.headers["content-length"]) > 0
    assert on_any.content == b""
    assert on_get.status_code == 404  # HTTP API does not serve HEAD from a GET route


def test_keep_alive_serves_several_requests_on_one_connection(base_url: str) -> None:
    host, port = base_url.removeprefix("http://").split(":")
    request = f"GET /v1/health HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        reader = sock.makefile("rb")
        for _ in range(2):
            sock.sendall(request)
            assert reader.readline().startswith(b"HTTP/1.1 200")
            headers = {}
            while (line := reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            assert json.loads(reader.read(int(headers["content-length"]))) == {"status": "ok"}


@pytest.mark.parametrize("quiet", [False])
def test_a_client_leaving_mid_response_does_not_hurt_the_server(
    base_url: str, client: httpx.Client, capsys: pytest.CaptureFixture[str]
) -> None:
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(f"GET /v1/big HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        assert sock.recv(64).startswith(b"HTTP/1.1 200")
        # Linger 0 makes close() send RST, the way a killed client goes away.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    after = client.get("/v1/health")

    err = ""

    def logged() -> bool:
        nonlocal err
        err += capsys.readouterr().err
        return "GET /v1/big 200" in err

    assert after.status_code == 200
    eventually(logged, timeout=5, interval=0.01, what="the access log line")
    assert "Traceback" not in err


def test_a_client_leaving_mid_request_invokes_nothing(
    base_url: str, client: httpx.Client, recorder: Recorder
) -> None:
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(
            f"POST /v1/blobs HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: 1000\r\n"
            "Content-Type: text/plain\r\n\r\nonly a little".encode()
        )

    after = client.get("/v1/health")

    assert after.status_code == 200
    assert recorder.calls == ["Health"]


def test_five_hundred_connections_opened_at_once_are_all_held_then_served(recorder: Recorder) -> None:
    """Issue 30: socketserver's listen backlog of 5 dropped most of a burst of connections before the
    accept loop could take them. Nothing accepts until all 500 are open: the kernel must hold them."""
    import select

    from stepwise_local.gateway import bind

    server = bind(Gateway(ROUTES, recorder, authorizer="Authorizer"), port=0, quiet=True)
    address = server.server_address[:2]
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(500)]
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    try:
        for s in sockets:
            s.setblocking(False)
            assert s.connect_ex(address) in (0, errno.EINPROGRESS)

        def all_established() -> bool:
            _, writable, _ = select.select([], sockets, [], 0)
            established = [s for s in writable if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0]
            assert len(established) == len(sockets), f"{len(established)} of {len(sockets)} established"
            return True

        eventually(all_established, timeout=5, what="the kernel to complete every handshake")

        serving.start()
        for s in sockets:
            s.setblocking(True)
            s.settimeout(30)
            s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: local\r\nConnection: close\r\n\r\n")
        statuses = [_read_all(s).split(b"\r\n", 1)[0] for s in sockets]
        assert statuses == [b"HTTP/1.1 200 OK"] * len(sockets)
        assert recorder.calls.count("Health") == len(sockets)
    finally:
        for s in sockets:
            s.close()
        if serving.is_alive():
            server.shutdown()
        server.server_close()


def _read_all(s: socket.socket) -> bytes:
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data

"""A local stand-in for an API Gateway WebSocket API: its `$connect` route's Lambda REQUEST authorizer,
`$connect` and `$disconnect` Lambda proxy integrations, and the `@connections` management API that
functions post to (moto's is a recorder; the one here delivers to the sockets).

Like API Gateway, a connection exists for `@connections` only once `$connect` has returned 200, the
authorizer's context reaches `$connect` and `$disconnect` in `requestContext.authorizer`, and posting
to a connection that is not open is a 410 GoneException. Behaviour follows the API Gateway Developer
Guide ("Working with WebSocket APIs", "Controlling access to WebSocket APIs with Lambda REQUEST
authorizers", "Use @connections commands in your backend service").
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.sync.server import Server, ServerConnection, serve

log = logging.getLogger("stepwise_local")

Invoke = Callable[[str, dict[str, Any]], Any]
ACCOUNT_ID = "123456789012"
REGION = "us-east-1"
API_ID = "local"
STAGE = "live"


@dataclass(frozen=True)
class SocketApi:
    """What template.yaml says of the WebSocket API: which function serves each route, which one
    authorizes `$connect`, and the query parameter it reads."""

    connect: str | None
    disconnect: str | None
    authorizer: str | None
    identity_query: str | None  # from IdentitySource `route.request.querystring.<name>`


def websocket_api(
    resources: dict[str, Any], resolve: Callable[[Any], Any], logical_id: Callable[[str], str]
) -> SocketApi | None:
    """The template's WebSocket API: which function each route's integration and the `$connect`
    authorizer invoke (their URIs name the function's ARN), and the authorizer's query parameter."""
    apis = [
        k
        for k, v in resources.items()
        if v["Type"] == "AWS::ApiGatewayV2::Api" and v["Properties"].get("ProtocolType") == "WEBSOCKET"
    ]
    if not apis:
        return None
    if len(apis) > 1:
        raise ValueError("the local stack serves one WebSocket API")

    def of(kind: str) -> dict[str, dict[str, Any]]:
        return {k: v["Properties"] for k, v in resources.items() if v["Type"] == kind}

    def function(uri: Any) -> str:
        arn = str(resolve(uri)).split("/functions/", 1)[-1].removesuffix("/invocations")
        return logical_id(arn)

    integrations = {k: function(p["IntegrationUri"]) for k, p in of("AWS::ApiGatewayV2::Integration").items()}
    authorizers = of("AWS::ApiGatewayV2::Authorizer")
    targets: dict[str, str] = {}
    authorizer = identity = None
    for props in of("AWS::ApiGatewayV2::Route").values():
        target = props.get("Target", {})
        text = target.get("Fn::Sub", "") if isinstance(target, dict) else str(target)
        match = re.fullmatch(r"integrations/\$\{(\w+)\}", text)
        if match is None:
            raise ValueError(f"route {props['RouteKey']}: Target must be !Sub integrations/${{Integration}}")
        targets[props["RouteKey"]] = integrations[match.group(1)]
        if props["RouteKey"] == "$connect" and props.get("AuthorizationType") == "CUSTOM":
            spec = authorizers[props["AuthorizerId"]["Ref"]]
            authorizer = function(spec["AuthorizerUri"])
            (source,) = spec["IdentitySource"]
            identity = source.removeprefix("route.request.querystring.")
    return SocketApi(targets.get("$connect"), targets.get("$disconnect"), authorizer, identity)


@dataclass
class _Open:
    socket: ServerConnection
    authorizer: dict[str, Any]


class SocketGateway:
    """Serves the WebSocket API on loopback and plays `@connections` for the functions."""

    def __init__(self, api: SocketApi, invoke: Invoke, host: str = "127.0.0.1", port: int = 0) -> None:
        self.api = api
        self._invoke = invoke
        self._open: dict[str, _Open] = {}
        self._pending: dict[uuid.UUID, tuple[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._server: Server = serve(
            self._session, host, port, process_request=self._handshake, compression=None
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="websocket", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.socket.getsockname()[:2]
        return f"ws://{host}:{port}/{STAGE}"

    def stop(self) -> None:
        self._server.shutdown()

    # --- @connections ---------------------------------------------------------------------------

    def is_open(self, connection_id: str) -> bool:
        with self._lock:
            return connection_id in self._open

    def post(self, connection_id: str, data: bytes) -> bool:
        """Send one text message; False when the connection is not open (API Gateway's 410)."""
        with self._lock:
            found = self._open.get(connection_id)
        if found is None:
            return False
        try:
            found.socket.send(data.decode("utf-8"))
        except Exception:  # noqa: BLE001 - a socket that broke mid-send is simply gone, as in AWS
            return False
        return True

    def close(self, connection_id: str) -> bool:
        with self._lock:
            found = self._open.get(connection_id)
        if found is None:
            return False
        found.socket.close()
        return True

    # --- The API's side of a connection ---------------------------------------------------------

    def _handshake(self, connection: ServerConnection, request: Request) -> Response | None:
        """Authorizer, then `$connect`; anything but a 2xx refuses the upgrade."""
        connection_id = secrets.token_urlsafe(12)
        query = dict(parse_qsl(urlsplit(request.path).query, keep_blank_values=True))
        headers = {k.lower(): v for k, v in request.headers.raw_items()}
        context = self._context("$connect", "CONNECT", connection_id, headers)
        authorizer: dict[str, Any] = {}
        if self.api.authorizer is not None:
            identity = query.get(self.api.identity_query or "", "")
            if not identity:  # a missing identity source is refused without invoking anything
                return _refusal(connection, 401)
            allowed = self._authorize(connection_id, headers, query, context)
            if allowed is None:
                return _refusal(connection, 403)
            authorizer = allowed
        if self.api.connect is not None:
            event = {
                "headers": headers,
                "queryStringParameters": query or None,
                "requestContext": {**context, "authorizer": authorizer or None},
                "isBase64Encoded": False,
            }
            try:
                result = self._invoke(self.api.connect, event)
            except Exception:
                log.exception("$connect failed")
                return _refusal(connection, 500)
            status = int((result or {}).get("statusCode", 200)) if isinstance(result, dict) else 200
            if not 200 <= status < 300:
                return _refusal(connection, status)
        with self._lock:
            self._pending[connection.id] = (connection_id, authorizer)
        return None

    def _authorize(
        self, connection_id: str, headers: dict[str, str], query: dict[str, str], context: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The authorizer's context when its policy allows `$connect`, else None."""
        method_arn = f"arn:aws:execute-api:{REGION}:{ACCOUNT_ID}:{API_ID}/{STAGE}/$connect"
        event = {
            "type": "REQUEST",
            "methodArn": method_arn,
            "headers": headers,
            "queryStringParameters": query,
            "stageVariables": {},
            "requestContext": context,
        }
        try:
            result = self._invoke(str(self.api.authorizer), event)
        except Exception:
            log.exception("the follow authorizer failed")
            return None
        if not isinstance(result, dict) or not _allows(result.get("policyDocument") or {}, method_arn):
            return None
        # API Gateway hands the context on with every value as a string, plus principalId.
        granted = result.get("context") or {}
        values = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in granted.items()}
        return {"principalId": str(result.get("principalId", "")), **values, "integrationLatency": 0}

    def _session(self, connection: ServerConnection) -> None:
        with self._lock:
            connection_id, authorizer = self._pending.pop(connection.id)
            self._open[connection_id] = _Open(connection, authorizer)
        try:
            for _ in connection:
                pass  # the API routes no client message; API Gateway would answer an error frame
        finally:
            with self._lock:
                self._open.pop(connection_id, None)
            if self.api.disconnect is not None:
                context = self._context("$disconnect", "DISCONNECT", connection_id, {})
                event = {"headers": {}, "requestContext": {**context, "authorizer": authorizer or None}}
                try:
                    self._invoke(self.api.disconnect, event)
                except Exception:
                    log.exception("$disconnect failed")

    def _context(
        self, route: str, event_type: str, connection_id: str, headers: dict[str, str]
    ) -> dict[str, Any]:
        now = int(time.time() * 1000)
        return {
            "routeKey": route,
            "eventType": event_type,
            "messageDirection": "IN",
            "stage": STAGE,
            "connectedAt": now,
            "requestTimeEpoch": now,
            "requestId": str(uuid.uuid4()),
            "domainName": headers.get("host", ""),
            "connectionId": connection_id,
            "apiId": API_ID,
            "identity": {"sourceIp": "127.0.0.1", "userAgent": headers.get("user-agent", "")},
        }


def _allows(policy: dict[str, Any], method_arn: str) -> bool:
    """IAM's rule for the authorizer's policy: an explicit Deny wins, else some Allow must match."""
    allowed = False
    for statement in policy.get("Statement") or []:
        actions = statement.get("Action") or []
        resources = statement.get("Resource") or []
        actions = [actions] if isinstance(actions, str) else actions
        resources = [resources] if isinstance(resources, str) else resources
        if not any(fnmatch.fnmatchcase("execute-api:Invoke", a) for a in actions):
            continue
        if not any(fnmatch.fnmatchcase(method_arn, r) for r in resources):
            continue
        if statement.get("Effect") == "Deny":
            return False
        allowed = allowed or statement.get("Effect") == "Allow"
    return allowed


def _refusal(connection: ServerConnection, status: int) -> Response:
    reasons = {401: "Unauthorized", 403: "Forbidden", 500: "Internal Server Error"}
    body = json.dumps({"message": reasons.get(status, "Error")})
    response = connection.respond(status, body)
    response.headers = Headers([("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return response


def install_connections_api(gateway: SocketGateway) -> Callable[[], None]:
    """Route moto's `apigatewaymanagementapi` (post_to_connection, get_connection, delete_connection)
    to the local sockets; returns a function that undoes it."""
    from moto.apigatewaymanagementapi.models import ApiGatewayManagementApiBackend, Connection
    from moto.core.exceptions import JsonRESTError

    class GoneException(JsonRESTError):
        code = 410

        def __init__(self, connection_id: str) -> None:
            super().__init__("GoneException", f"connection {connection_id} is gone")

    def post_to_connection(backend: Any, data: bytes, connection_id: str) -> None:
        if not gateway.post(connection_id, data):
            raise GoneException(connection_id)

    def get_connection(backend: Any, connection_id: str) -> Any:
        if not gateway.is_open(connection_id):
            raise GoneException(connection_id)
        return Connection()

    def delete_connection(backend: Any, connection_id: str) -> None:
        if not gateway.close(connection_id):
            raise GoneException(connection_id)

    names = ("post_to_connection", "get_connection", "delete_connection")
    originals = {name: getattr(ApiGatewayManagementApiBackend, name) for name in names}
    replacements = (post_to_connection, get_connection, delete_connection)
    for name, replacement in zip(names, replacements, strict=True):
        setattr(ApiGatewayManagementApiBackend, name, replacement)

    def undo() -> None:
        for name, method in originals.items():
            setattr(ApiGatewayManagementApiBackend, name, method)

    return undo

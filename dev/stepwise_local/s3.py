"""A loopback S3 endpoint for presigned URLs: an app outside the process PUTs (or GETs) to it exactly
as it would to S3, and the request reaches moto's in-process S3, the one every function uses.

Like S3, it checks the presigned query before anything is stored: the SigV4 signature recomputed over
the signed headers as received (so a body of another length, type or name than the URL was signed for
is a 403 SignatureDoesNotMatch), and the URL's expiry (403 AccessDenied "Request has expired"). The
request then goes on to moto through `requests`, which moto's mock intercepts for AWS hosts.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

log = logging.getLogger("stepwise_local")

REGION = "us-east-1"
UPSTREAM = "https://s3.amazonaws.com"  # path-style, as the presigner signs for a custom endpoint
_TIMESTAMP = "%Y%m%dT%H%M%SZ"
_FORWARDED = frozenset({"host", "connection", "keep-alive", "transfer-encoding", "expect"})


def _error(code: str, message: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message>'
        "</Error>"
    ).encode()


def refusal(method: str, url: str, headers: dict[str, str], now: datetime | None = None) -> bytes | None:
    """Why S3 would refuse this presigned request (its XML error), or None when it is good."""
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if query.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" or "X-Amz-Signature" not in query:
        return _error("AccessDenied", "Only presigned (query-string SigV4) requests are served here")
    try:
        signed_at = datetime.strptime(query["X-Amz-Date"], _TIMESTAMP).replace(tzinfo=UTC)
        expires = int(query["X-Amz-Expires"])
    except (KeyError, ValueError):
        return _error("AuthorizationQueryParametersError", "X-Amz-Date and X-Amz-Expires are required")
    if (now or datetime.now(UTC)) > signed_at + timedelta(seconds=expires):
        return _error("AccessDenied", "Request has expired")
    # Recompute the signature over what arrived: the same method, path, unsigned query and the values
    # of the headers the URL names as signed. botocore signs with the local stack's fake credentials.
    lower = {k.lower(): v for k, v in headers.items()}
    signed_names = query.get("X-Amz-SignedHeaders", "host").split(";")
    signed_headers = {name: lower.get(name, "") for name in signed_names}
    unsigned = {k: v for k, v in query.items() if not k.startswith("X-Amz-")}
    bare = parts._replace(query=urlencode(unsigned)).geturl()
    request = AWSRequest(method=method, url=bare, headers=signed_headers)
    request.context["timestamp"] = query["X-Amz-Date"]
    credentials = Credentials(
        os.environ.get("AWS_ACCESS_KEY_ID", ""),
        os.environ.get("AWS_SECRET_ACCESS_KEY", ""),
        os.environ.get("AWS_SESSION_TOKEN") or None,
    )
    auth = S3SigV4QueryAuth(credentials, "s3", REGION, expires=expires)
    auth._modify_request_before_signing(request)  # adds back the X-Amz-* query (token included)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    if not hmac.compare_digest(expected, query["X-Amz-Signature"]):
        return _error(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided",
        )
    return None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items()}
        url = f"{self.server.url}{self.path}"
        refused = refusal(self.command, url, headers)
        if refused is not None:
            self._answer(403, {"Content-Type": "application/xml"}, refused)
            return
        import requests  # moto's mock answers requests made with it to AWS hosts

        forwarded = {k: v for k, v in headers.items() if k.lower() not in _FORWARDED}
        upstream = requests.request(self.command, f"{UPSTREAM}{self.path}", headers=forwarded, data=body)
        kept = {
            k: v
            for k, v in upstream.headers.items()
            if k.lower() not in ("content-length", "transfer-encoding")
        }
        self._answer(upstream.status_code, kept, b"" if self.command == "HEAD" else upstream.content)

    def _answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_PUT = do_GET = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("s3 %s", format % args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    url = ""


def serve(host: str = "127.0.0.1", port: int = 0) -> _Server:
    """Start the endpoint on a daemon thread (port 0: any free port); its base URL is `server.url`."""
    server = _Server((host, port), _Handler)
    server.url = f"http://{host}:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server

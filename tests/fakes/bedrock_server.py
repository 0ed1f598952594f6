"""A fake Bedrock Runtime Converse API on loopback: records every request and answers scripted replies
as Bedrock does, `ConverseStream` in AWS's binary event-stream framing.

`POST /model/{modelId}/converse-stream` answers `application/vnd.amazon.eventstream` messages
(messageStart, contentBlockStart for a tool call, contentBlockDelta with text or toolUse input,
contentBlockStop, messageStop, metadata with the usage, cache reads and writes included);
`POST /model/{modelId}/converse` answers the same reply as one JSON body (litellm uses it for
non-streamed calls). Every request is recorded with its path, model id, headers and JSON body.

Pointing litellm 1.110.2 at it: `AWS_BEDROCK_RUNTIME_ENDPOINT=server.url` (read on every call;
llms/bedrock/base_aws_llm.py get_runtime_endpoint: `api_base` > `aws_bedrock_runtime_endpoint` >
that variable > bedrock-runtime.{region}), plus a region and credentials for the SigV4 signature
litellm always computes (`AWS_REGION_NAME`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`). The
signature is recorded, not checked.

botocore ships only a decoder for the framing (botocore.eventstream), so `encode_event` is here.
"""

from __future__ import annotations

import binascii
import json
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

_STRING = 7  # the event-stream header value type for a UTF-8 string


def encode_event(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message: prelude (total length, headers length, prelude CRC32), headers
    (name length, name, type 7, value length, value), payload, CRC32 of everything before it."""
    encoded = b""
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        encoded += (
            struct.pack("!B", len(raw_name))
            + raw_name
            + struct.pack("!BH", _STRING, len(raw_value))
            + raw_value
        )
    prelude = struct.pack("!II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    message = prelude + struct.pack("!I", binascii.crc32(prelude)) + encoded + payload
    return message + struct.pack("!I", binascii.crc32(message))


def event(event_type: str, body: dict[str, Any]) -> bytes:
    """A ConverseStream event as Bedrock frames it."""
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return encode_event(headers, json.dumps(body).encode())


def exception(exception_type: str, message: str) -> bytes:
    """An error Bedrock reports inside a stream that had started with HTTP 200."""
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_event(headers, json.dumps({"message": message}).encode())


@dataclass
class BedrockReply:
    text: str = "Done."  # "" with tool calls: a reply of toolUse blocks alone
    input_tokens: int = 10  # the uncached part of the prompt, as Bedrock counts it
    cache_read: int = 0
    cache_write: int = 0
    output_tokens: int = 5
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, input)
    stop_reason: str | None = None  # else tool_use with tool calls, end_turn without
    status: int = 200  # not 200: answered with `message` as the JSON body and `error` as x-amzn-errortype
    error: str = "ThrottlingException"
    message: str = "Too many requests, please wait before trying again."
    stream_exception: str | None = None  # e.g. "throttlingException": sent after the first event


@dataclass(frozen=True)
class BedrockRequest:
    path: str
    model_id: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeBedrock:
    def __init__(self) -> None:
        self.requests: list[BedrockRequest] = []
        self.replies: list[BedrockReply] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # chunked transfer: one chunk per event, as Bedrock streams

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) != 3 or parts[0] != "model" or parts[2] not in ("converse", "converse-stream"):
                    self._send(
                        404, "application/json", json.dumps({"message": f"no route {self.path}"}).encode()
                    )
                    return
                recorded = BedrockRequest(
                    path=self.path,
                    model_id=unquote(parts[1]),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=json.loads(raw or b"{}"),
                )
                with fake._lock:  # a tool call's id is numbered by the request it answers
                    fake.requests.append(recorded)
                    number = len(fake.requests)
                    reply = fake.replies.pop(0) if fake.replies else BedrockReply()
                if reply.status != 200:
                    body = json.dumps({"message": reply.message}).encode()
                    self._send(reply.status, "application/json", body, {"x-amzn-errortype": reply.error})
                elif parts[2] == "converse":
                    self._send(200, "application/json", json.dumps(_converse(reply, number)).encode())
                else:
                    self._stream(_stream_events(reply, number))

            def _send(self, status: int, kind: str, data: bytes, extra: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.send_header("x-amzn-requestid", "fake-request-id")
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, frames: list[bytes]) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/vnd.amazon.eventstream")
                self.send_header("transfer-encoding", "chunked")
                self.send_header("x-amzn-requestid", "fake-request-id")
                self.end_headers()
                for frame in frames:
                    self.wfile.write(f"{len(frame):x}\r\n".encode() + frame + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- Converse shapes ---------------------------------------------------------------------------------


def _usage(reply: BedrockReply) -> dict[str, Any]:
    return {
        "inputTokens": reply.input_tokens,
        "outputTokens": reply.output_tokens,
        "totalTokens": reply.input_tokens + reply.cache_read + reply.cache_write + reply.output_tokens,
        "cacheReadInputTokens": reply.cache_read,
        "cacheWriteInputTokens": reply.cache_write,
    }


def _stop(reply: BedrockReply) -> str:
    return reply.stop_reason or ("tool_use" if reply.tool_calls else "end_turn")


def _tool_uses(reply: BedrockReply, request: int) -> list[dict[str, Any]]:
    return [
        {"toolUseId": f"tooluse_{request}_{i}", "name": name, "input": arguments}
        for i, (name, arguments) in enumerate(reply.tool_calls)
    ]


def _converse(reply: BedrockReply, request: int) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"text": reply.text}] if reply.text else []
    content += [{"toolUse": use} for use in _tool_uses(reply, request)]
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": _stop(reply),
        "usage": _usage(reply),
        "metrics": {"latencyMs": 42},
    }


def _halves(text: str) -> list[str]:
    """Text split in two deltas (one if it is a single character), as a stream delivers it."""
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def _stream_events(reply: BedrockReply, request: int) -> list[bytes]:
    frames = [event("messageStart", {"role": "assistant"})]
    if reply.stream_exception is not None:
        return [*frames, exception(reply.stream_exception, "scripted failure mid-stream")]
    index = 0
    if reply.text:  # a text block has no start event in a Converse stream, only deltas
        frames += [
            event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": t}})
            for t in _halves(reply.text)
        ]
        frames.append(event("contentBlockStop", {"contentBlockIndex": 0}))
        index = 1
    for offset, use in enumerate(_tool_uses(reply, request)):
        block = index + offset
        start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
        frames.append(event("contentBlockStart", {"contentBlockIndex": block, "start": start}))
        frames += [
            event("contentBlockDelta", {"contentBlockIndex": block, "delta": {"toolUse": {"input": part}}})
            for part in _halves(json.dumps(use["input"]))
        ]
        frames.append(event("contentBlockStop", {"contentBlockIndex": block}))
    return [
        *frames,
        event("messageStop", {"stopReason": _stop(reply)}),
        event("metadata", {"usage": _usage(reply), "metrics": {"latencyMs": 42}}),
    ]

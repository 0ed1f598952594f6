"""A fake Anthropic Messages API on loopback: records every request body and streams scripted replies
as the real API does (message_start carrying the prompt's usage, cache reads and writes included)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class AnthropicReply:
    text: str = "Done."  # "" with tool calls: a reply of tool_use blocks alone
    input_tokens: int = 10  # the uncached part of the prompt, as Anthropic counts it
    cache_read: int = 0
    cache_write: int = 0
    output_tokens: int = 5
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (name, input)


class FakeAnthropic:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[AnthropicReply] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                with fake._lock:  # a tool call's id is numbered by the request it answers
                    fake.requests.append(body)
                    number = len(fake.requests)
                    reply = fake.replies.pop(0) if fake.replies else AnthropicReply()
                if not body.get("stream"):
                    self._send(200, "application/json", json.dumps(_message(body, reply, number)).encode())
                    return
                streamed = _events(body, reply, number)
                frames = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in streamed]
                events = "".join(frames)
                self._send(200, "text/event-stream", events.encode())

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _usage(reply: AnthropicReply) -> dict[str, Any]:
    return {
        "input_tokens": reply.input_tokens,
        "cache_creation_input_tokens": reply.cache_write,
        "cache_read_input_tokens": reply.cache_read,
        "output_tokens": reply.output_tokens,
    }


def _blocks(reply: AnthropicReply, request: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": reply.text}] if reply.text else []
    blocks += [
        {"type": "tool_use", "id": f"toolu_{request}_{i}", "name": name, "input": arguments}
        for i, (name, arguments) in enumerate(reply.tool_calls)
    ]
    return blocks


def _stop(reply: AnthropicReply) -> str:
    return "tool_use" if reply.tool_calls else "end_turn"


def _message(body: dict[str, Any], reply: AnthropicReply, request: int = 0) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-fake"),
        "content": _blocks(reply, request),
        "stop_reason": _stop(reply),
        "stop_sequence": None,
        "usage": _usage(reply),
    }


def _events(body: dict[str, Any], reply: AnthropicReply, request: int = 0) -> list[dict[str, Any]]:
    start = {**_message(body, reply, request), "content": [], "stop_reason": None}
    start["usage"] = {**_usage(reply), "output_tokens": 1}
    frames: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for index, block in enumerate(_blocks(reply, request)):
        if block["type"] == "text":
            opened: dict[str, Any] = {"type": "text", "text": ""}
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        else:  # a tool call streams its input as JSON fragments
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        frames += [
            {"type": "content_block_start", "index": index, "content_block": opened},
            {"type": "content_block_delta", "index": index, "delta": delta},
            {"type": "content_block_stop", "index": index},
        ]
    return [
        *frames,
        {
            "type": "message_delta",
            "delta": {"stop_reason": _stop(reply), "stop_sequence": None},
            "usage": {"output_tokens": reply.output_tokens},
        },
        {"type": "message_stop"},
    ]

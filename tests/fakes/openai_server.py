"""A fake OpenAI-compatible chat and embedding model on loopback: the peer for tests that run real litellm
over real HTTP.

The test queues replies (`text`, `tool_calls`, `length`, `empty`, `error`, ...); each request to
`POST /v1/chat/completions` takes the next one, or a default text when the queue is empty, and is
answered as OpenAI would: a `chat.completion` JSON body, or with `"stream": true` Server-Sent Events of
`chat.completion.chunk`s ending in `data: [DONE]`, with a usage-only chunk before it when the request
asks for `stream_options.include_usage`. Every request is recorded.

`POST /v1/embeddings` answers every input with `embedding_of(text)`: a bag of words hashed into
EMBEDDING_DIMS dimensions, unit length, so texts sharing words are close. A test declares words that
mean the same (`same_meaning("drink", "espresso")`): they hash as one, so texts with no word in common
can be close here while BM25 sees nothing alike. Embedding requests are recorded in `embedded`.

Pointing litellm 1.110.2 at it, for the `openai/` provider (`openai/<any name>`; the name is sent
through verbatim, and one the cost map does not know is always served by chat completions):

- per call: `api_base=server.url`, `api_key="sk-fake"`;
- or per process: `OPENAI_BASE_URL=server.url` (`OPENAI_API_BASE` is the fallback litellm reads
  after it) and `OPENAI_API_KEY=sk-fake`. Both are read on every call
  (litellm.main._complete_custom_openai → responses.bridge_check._resolve_openai_api_base:
  argument > `litellm.api_base` > `OPENAI_BASE_URL` > `OPENAI_API_BASE` > api.openai.com), so
  setting them after litellm is imported works. Without a key the OpenAI SDK refuses to build a
  client, so set one even though this server ignores it.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_TEXT = "Hello from the fake model."
EMBEDDING_DIMS = 256
CONTEXT_LENGTH_BODY = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        "9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
RATE_LIMIT_BODY = {
    "error": {
        "message": "Rate limit reached for requests. Please try again in 20s.",
        "type": "requests",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}
SERVER_ERROR_BODY = {
    "error": {"message": "The server had an error while processing your request.", "type": "server_error"}
}


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Reply:
    """One scripted answer. `usage(...)` attaches token counts (else they are estimated)."""

    content: str | None = None
    calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    finish_reason: str = "stop"
    chunks: int = 3
    status: int = 200
    error_body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    tokens: tuple[int, int, int] | None = None
    cut_after: int | None = None  # stream: drop the connection after this many content chunks
    # Decides the reply from the request when it arrives (what the model was shown names ids that
    # only exist once the run has started).
    decide: Callable[[dict[str, Any]], Reply] | None = None

    def usage(self, prompt: int, completion: int, cached: int = 0) -> Reply:
        self.tokens = (prompt, completion, cached)
        return self


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.embedded: list[Recorded] = []
        self.synonyms: dict[str, str] = {}
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # chunked transfer, so a dropped stream is visibly incomplete

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b"{}"
                path = self.path.split("?")[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                if path.endswith("/embeddings"):
                    body = json.loads(raw)
                    with fake._lock:
                        fake.embedded.append(Recorded(path, headers, body))
                    self._json(200, _embeddings(body, fake.embedding_of))
                    return
                if not path.endswith("/chat/completions"):
                    self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
                    return
                body = json.loads(raw)
                with fake._lock:
                    fake.requests.append(Recorded(path, headers, body))
                    reply = fake._replies.popleft() if fake._replies else Reply(content=DEFAULT_TEXT)
                    ident = f"chatcmpl-fake{next(fake._ids)}"
                if reply.decide is not None:
                    reply = reply.decide(body)
                if reply.status != 200:
                    self._json(reply.status, reply.error_body, reply.headers)
                elif body.get("stream"):
                    self._stream(ident, body, reply)
                else:
                    self._json(200, _completion(ident, body, reply))

            def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, ident: str, request: dict[str, Any], reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                events = _chunks(ident, request, reply)
                for n, event in enumerate(events):
                    if reply.cut_after is not None and n > reply.cut_after:
                        self.wfile.flush()
                        self.close_connection = True
                        return  # no terminating zero-length chunk: the client sees a broken body
                    self._send(b"data: " + json.dumps(event).encode() + b"\n\n")
                self._send(b"data: [DONE]\n\n")
                self.wfile.write(b"0\r\n\r\n")

            def _send(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def embedding_of(self, text: str) -> list[float]:
        """Word counts (each word as its declared meaning) hashed into EMBEDDING_DIMS, unit length."""
        vector = [0.0] * EMBEDDING_DIMS
        for word in re.findall(r"\w+", text.lower()):
            meaning = self.synonyms.get(word, word)
            vector[int.from_bytes(hashlib.sha256(meaning.encode()).digest()[:4], "big") % EMBEDDING_DIMS] += 1
        norm = math.sqrt(sum(x * x for x in vector))
        return [x / norm for x in vector] if norm else vector

    # --- scripting ------------------------------------------------------------------------------------

    def same_meaning(self, *words: str) -> None:
        """These words embed as one (the first)."""
        for word in words:
            self.synonyms[word.lower()] = words[0].lower()

    def clear(self) -> None:
        """Drop the replies not yet given: every request after this gets the default answer."""
        with self._lock:
            self._replies.clear()

    def push(self, reply: Reply) -> Reply:
        with self._lock:
            self._replies.append(reply)
        return reply

    def text(self, content: str, finish_reason: str = "stop", chunks: int = 3) -> Reply:
        return self.push(Reply(content=content, finish_reason=finish_reason, chunks=chunks))

    def length(self, content: str, chunks: int = 3) -> Reply:
        """A reply cut off at the token limit (`finish_reason: length`)."""
        return self.text(content, finish_reason="length", chunks=chunks)

    def tool_calls(self, calls: list[tuple[str, dict[str, Any] | str]], content: str | None = None) -> Reply:
        """Tool calls whose arguments stream split across several deltas; a str is sent verbatim."""
        return self.push(Reply(content=content, calls=list(calls), finish_reason="tool_calls"))

    def answer(self, decide: Callable[[dict[str, Any]], Reply]) -> Reply:
        """A reply decided from the request it answers."""
        return self.push(Reply(decide=decide))

    def empty(self) -> Reply:
        """No text and no tool calls."""
        return self.push(Reply(content=None))

    def error(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> Reply:
        default = {429: RATE_LIMIT_BODY, 400: CONTEXT_LENGTH_BODY}.get(status, SERVER_ERROR_BODY)
        extra = dict(headers or {})
        if status == 429:
            extra.setdefault("Retry-After", "1")
        return self.push(Reply(status=status, error_body=default if body is None else body, headers=extra))

    def rate_limited(self) -> Reply:
        return self.error(429, RATE_LIMIT_BODY)

    def context_too_long(self) -> Reply:
        return self.error(400, CONTEXT_LENGTH_BODY)

    def broken_stream(self, content: str, after: int = 1, chunks: int = 4) -> Reply:
        """A stream that drops its connection after `after` content chunks (a streamed request only)."""
        return self.push(Reply(content=content, chunks=chunks, cut_after=after))


# --- OpenAI shapes ----------------------------------------------------------------------------------


def _split(text: str, parts: int) -> list[str]:
    if not text:
        return []
    parts = max(1, min(parts, len(text)))
    size = -(-len(text) // parts)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _arguments(arguments: dict[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _call_id(ident: str, i: int) -> str:
    return f"call_{ident.removeprefix('chatcmpl-')}_{i}"


def _usage(request: dict[str, Any], reply: Reply) -> dict[str, Any]:
    if reply.tokens is not None:
        prompt, completion, cached = reply.tokens
    else:
        said = (reply.content or "") + json.dumps(reply.calls)
        prompt, completion, cached = max(1, len(json.dumps(request.get("messages"))) // 4), len(said) // 4, 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def _completion(ident: str, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
    if reply.calls:
        message["tool_calls"] = [
            {
                "id": _call_id(ident, i),
                "type": "function",
                "function": {"name": name, "arguments": _arguments(args)},
            }
            for i, (name, args) in enumerate(reply.calls)
        ]
    return {
        "id": ident,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
        "usage": _usage(request, reply),
    }


def _embeddings(request: dict[str, Any], embed: Callable[[str], list[float]]) -> dict[str, Any]:
    inputs = request.get("input")
    texts = [inputs] if isinstance(inputs, str) else list(inputs or [])

    def encoded(vector: list[float]) -> list[float] | str:
        # The OpenAI SDK asks for base64 (little-endian float32) unless its caller names a format.
        if request.get("encoding_format") == "base64":
            return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        return vector

    tokens = sum(len(str(t).split()) for t in texts)
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encoded(embed(str(text)))}
            for i, text in enumerate(texts)
        ],
        "model": request.get("model", "fake"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _chunks(ident: str, request: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
    created, model = int(time.time()), request.get("model", "fake")
    with_usage = bool((request.get("stream_options") or {}).get("include_usage"))

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        event: dict[str, Any] = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if with_usage:
            event["usage"] = None
        return event

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    events += [chunk({"content": part}) for part in _split(reply.content or "", reply.chunks)]
    for i, (name, arguments) in enumerate(reply.calls):
        head = {"index": i, "id": _call_id(ident, i), "type": "function"}
        events.append(chunk({"tool_calls": [{**head, "function": {"name": name, "arguments": ""}}]}))
        for part in _split(_arguments(arguments), 3):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    events.append(chunk({}, reply.finish_reason))
    if with_usage:
        events.append(
            {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": _usage(request, reply),
            }
        )
    return events

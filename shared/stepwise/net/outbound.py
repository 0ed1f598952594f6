"""What every guarded outbound exchange may cost: the bytes a response decodes to and the wall-clock time.

A peer that a tenant or a model chose is hostile until proven otherwise. Two things it controls would
otherwise be unbounded:

- Decoded size. HTTP clients decode `Content-Encoding` as they read, and httpx 0.28 inflates each chunk
  in one call: 64 KiB of `gzip, gzip` inflates to gigabytes before any caller's byte count sees it. The
  guarded transports (`ssrf.GuardedTransport`, `mcp.transport`) therefore decode here instead: they ask
  for `gzip, deflate` only, refuse a response with more than one content-coding or one they did not
  offer (`unsupported_encoding`), inflate in pieces of at most DECODE_CHUNK bytes, and stop at the
  exchange's byte limit (`response_too_large`), counting decoded bytes, identity bodies included.
- Time. A per-read timeout restarts with every byte, so a peer trickling a header byte a second holds a
  request for as long as it likes. A `Deadline` is started once per exchange (the guarded client is
  built for one) and every connect, TLS handshake, read and write gets at most what is left of it.
"""

from __future__ import annotations

import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

import httpcore

ACCEPT_ENCODING = "gzip, deflate"  # what the guarded clients offer, and so all they decode
DECODE_CHUNK = 64 * 1024  # bytes one inflate step may produce
RESPONSE_LIMIT = 8 * 1024 * 1024  # decoded bytes of one response, unless the caller asks for less
_GZIP = zlib.MAX_WBITS | 16
_CODINGS = {"gzip": _GZIP, "x-gzip": _GZIP, "deflate": zlib.MAX_WBITS}

T = TypeVar("T")


class OutboundRefused(Exception):
    """A guarded exchange stopped by one of its rules; `code` is what a tool result or an error shows."""

    code = "outbound_refused"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ResponseTooLarge(OutboundRefused):
    code = "response_too_large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"the response decodes to more than {limit:,} bytes")
        self.limit = limit


class UnsupportedEncoding(OutboundRefused):
    code = "unsupported_encoding"


class DeadlineExceeded(TimeoutError):
    """The exchange's wall-clock deadline passed; the transports raise their library's timeout for it."""


# --- Decoding -------------------------------------------------------------------------------------


class HeaderList(Protocol):
    """The part of httpx's (and httpx2's) Headers the decoder needs."""

    def get_list(self, key: str, split_commas: bool = False) -> list[str]: ...

    def __delitem__(self, key: str) -> None: ...

    def __contains__(self, key: object) -> bool: ...


class BoundedBody:
    """Decodes one response body in bounded pieces and counts what it yields against `limit`."""

    def __init__(self, coding: str | None, limit: int) -> None:
        self._limit = limit
        self._size = 0
        self._wbits = _CODINGS[coding] if coding else None
        self._inflater = zlib.decompressobj(self._wbits) if self._wbits is not None else None
        self._first = True

    @classmethod
    def for_headers(cls, headers: HeaderList, limit: int) -> BoundedBody:
        """The decoder the response's Content-Encoding calls for; the header (and the Content-Length,
        which counts encoded bytes) is removed, because the body the client reads is already decoded.

        Raises UnsupportedEncoding for stacked codings and codings that were not offered."""
        codings = [
            value.strip().lower()
            for value in headers.get_list("content-encoding", split_commas=True)
            if value.strip().lower() not in ("", "identity")
        ]
        if len(codings) > 1:
            raise UnsupportedEncoding(
                f"the response stacks content-codings ({', '.join(codings)}); only one is accepted"
            )
        if codings and codings[0] not in _CODINGS:
            raise UnsupportedEncoding(
                f"the response uses content-coding {codings[0]!r}; only {ACCEPT_ENCODING} is accepted"
            )
        if "content-encoding" in headers:
            del headers["content-encoding"]
            if codings and "content-length" in headers:
                del headers["content-length"]
        return cls(codings[0] if codings else None, limit)

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded bytes of `data`, in pieces of at most DECODE_CHUNK."""
        if self._inflater is None:
            yield self._count(data)
            return
        try:
            yield from self._inflate(data)
        except zlib.error as exc:
            # Servers disagree on what "deflate" means: zlib-wrapped (the RFC) or raw. Like browsers
            # and httpx, retry the first chunk as raw deflate.
            if not (self._first and self._wbits == zlib.MAX_WBITS):
                raise UnsupportedEncoding(f"the response body is not valid {self._name}: {exc}") from None
            self._wbits = -zlib.MAX_WBITS
            self._inflater = zlib.decompressobj(self._wbits)
            yield from self.feed(data)
        finally:
            self._first = False

    def finish(self) -> Iterator[bytes]:
        if self._inflater is not None and not self._inflater.eof:
            rest = self._inflater.flush(DECODE_CHUNK)
            if rest:
                yield self._count(rest)

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        assert self._inflater is not None
        pending = data
        while pending and not self._inflater.eof:
            piece = self._inflater.decompress(pending, DECODE_CHUNK)
            pending = self._inflater.unconsumed_tail
            if piece:
                yield self._count(piece)
            elif pending:  # no progress on input that is still there: nothing more will come of it
                break
        # Bytes after the end of the (first) gzip member are ignored, as httpx does.

    def _count(self, piece: bytes) -> bytes:
        self._size += len(piece)
        if self._size > self._limit:
            raise ResponseTooLarge(self._limit)
        return piece

    @property
    def _name(self) -> str:
        return "gzip" if self._wbits == _GZIP else "deflate"


def bounded(raw: Iterable[bytes], body: BoundedBody) -> Iterator[bytes]:
    """The decoded body of a raw byte stream."""
    for chunk in raw:
        yield from body.feed(chunk)
    yield from body.finish()


# --- The deadline ---------------------------------------------------------------------------------


class Deadline:
    """A point in wall-clock time that one whole exchange must end by."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._at = clock() + seconds

    def remaining(self) -> float:
        """Seconds left; DeadlineExceeded when none are."""
        left = self._at - self._clock()
        if left <= 0:
            raise DeadlineExceeded(f"the exchange took longer than {self.seconds:g} seconds")
        return left

    def bound(self, timeout: float | None) -> float:
        """`timeout` cut to what is left (None, no timeout, becomes what is left)."""
        left = self.remaining()
        return left if timeout is None else min(timeout, left)

    def run(self, work: Callable[[], T]) -> T:
        """`work()` in a daemon thread, waited for at most until the deadline: for calls with no timeout
        of their own, like getaddrinfo against a name server that takes its time."""
        outcome: dict[str, object] = {}

        def target() -> None:
            try:
                outcome["value"] = work()
            except Exception as exc:  # noqa: BLE001 - not swallowed: the waiting thread raises it
                outcome["error"] = exc

        worker = threading.Thread(target=target, daemon=True, name="outbound-deadline")
        worker.start()
        worker.join(self.remaining())
        if worker.is_alive():
            raise DeadlineExceeded(f"the exchange took longer than {self.seconds:g} seconds")
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["value"]  # type: ignore[return-value]


# --- The deadline on httpcore's sockets -------------------------------------------------------------


class DeadlineStream(httpcore.NetworkStream):
    """A socket whose every operation gets at most what is left of the exchange's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(self._deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(self._deadline, timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _left(self._deadline, timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def _left(deadline: Deadline, timeout: float | None, error: type[httpcore.TimeoutException]) -> float:
    try:
        return deadline.bound(timeout)
    except DeadlineExceeded as exc:
        raise error(str(exc)) from None

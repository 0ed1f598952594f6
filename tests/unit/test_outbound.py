"""The outbound limits on their own: bounded decoding and the deadline (the clients are tested against
hostile peers in tests/integration/test_outbound_limits.py)."""

from __future__ import annotations

import zlib

import httpx
import pytest

from stepwise.net.outbound import (
    DECODE_CHUNK,
    BoundedBody,
    Deadline,
    DeadlineExceeded,
    ResponseTooLarge,
    UnsupportedEncoding,
    bounded,
)


def compress(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


def decode(headers: httpx.Headers, raw: bytes, limit: int = 10**7, chunk: int = 1000) -> bytes:
    body = BoundedBody.for_headers(headers, limit)
    return b"".join(bounded((raw[i : i + chunk] for i in range(0, len(raw), chunk)), body))


TEXT = b"stepwise " * 5000


@pytest.mark.parametrize(
    ("coding", "wbits"),
    [
        ("gzip", zlib.MAX_WBITS | 16),
        ("x-gzip", zlib.MAX_WBITS | 16),
        ("deflate", zlib.MAX_WBITS),
        ("deflate", -15),
    ],
)
def test_one_offered_coding_is_decoded_and_its_headers_dropped(coding: str, wbits: int) -> None:
    raw = compress(TEXT, wbits)
    headers = httpx.Headers({"Content-Encoding": coding, "Content-Length": str(len(raw))})

    assert decode(headers, raw) == TEXT
    assert "content-encoding" not in headers and "content-length" not in headers


def test_identity_keeps_its_content_length_and_still_counts() -> None:
    headers = httpx.Headers({"Content-Encoding": "identity", "Content-Length": "3"})
    assert decode(headers, b"abc") == b"abc"
    assert headers["content-length"] == "3"
    with pytest.raises(ResponseTooLarge):
        decode(httpx.Headers(), b"x" * 101, limit=100)


@pytest.mark.parametrize("value", ["gzip, gzip", "gzip, deflate", "deflate,gzip"])
def test_stacked_codings_are_refused(value: str) -> None:
    with pytest.raises(UnsupportedEncoding, match="stacks content-codings"):
        BoundedBody.for_headers(httpx.Headers({"Content-Encoding": value}), 100)


def test_a_coding_that_was_not_offered_is_refused() -> None:
    with pytest.raises(UnsupportedEncoding, match="'br'"):
        BoundedBody.for_headers(httpx.Headers({"Content-Encoding": "br"}), 100)


def test_a_bomb_inflates_in_bounded_pieces_up_to_the_limit() -> None:
    raw = compress(b"\0" * (50 * DECODE_CHUNK), zlib.MAX_WBITS | 16)
    body = BoundedBody.for_headers(httpx.Headers({"Content-Encoding": "gzip"}), 10 * DECODE_CHUNK)
    sizes: list[int] = []
    with pytest.raises(ResponseTooLarge):
        for piece in bounded([raw], body):  # the whole bomb in one chunk: still piece by piece
            sizes.append(len(piece))
    assert max(sizes) <= DECODE_CHUNK and sum(sizes) <= 10 * DECODE_CHUNK


def test_a_body_that_is_not_what_it_claims_is_refused() -> None:
    with pytest.raises(UnsupportedEncoding, match="not valid gzip"):
        decode(httpx.Headers({"Content-Encoding": "gzip"}), b"plain text")


def test_the_deadline_bounds_every_timeout_and_then_expires() -> None:
    now = [100.0]
    deadline = Deadline(5, clock=lambda: now[0])
    assert deadline.bound(30) == 5 and deadline.bound(None) == 5 and deadline.bound(2) == 2
    now[0] = 104.5
    assert deadline.bound(30) == pytest.approx(0.5)
    now[0] = 105.0
    with pytest.raises(DeadlineExceeded):
        deadline.bound(30)


def test_work_without_a_timeout_of_its_own_is_abandoned_at_the_deadline() -> None:
    import threading

    release = threading.Event()
    with pytest.raises(DeadlineExceeded):
        Deadline(0.05).run(lambda: release.wait(10))
    release.set()
    assert Deadline(5).run(lambda: 42) == 42
    with pytest.raises(OSError, match="nope"):
        Deadline(5).run(lambda: (_ for _ in ()).throw(OSError("nope")))

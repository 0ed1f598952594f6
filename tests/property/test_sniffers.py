"""The attachment sniffer (stepwise.attachments.sniff.Inspector) against generated files and chunkings:
however a file is cut into chunks, its size, SHA-256 and verdict are those of the whole file; a verdict
is an accepted type or a 422, never another error; and a file is only ever text when it is UTF-8 without
NUL bytes, only ever an image or a PDF when its magic number says so."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from stepwise.attachments.sniff import ACCEPTED, IMAGE_TYPES, PDF, TEXT_TYPES, Inspector
from stepwise.core.errors import Unprocessable
from tests.fakes.files import pdf, png

DECLARED = st.sampled_from(
    [
        "application/octet-stream",
        "text/plain",
        "text/csv",
        "application/json",
        "image/png",
        "image/jpeg",
        "application/pdf",
        "text/markdown",
        "image/jpg",
        "application/zip",
        "text/html; charset=utf-8",
    ]
)
NAMES = st.sampled_from(["file", "a.csv", "a.json", "a.md", "a.png", "a.pdf", "a.txt", "a.exe"])
MAGIC = st.sampled_from(
    [
        b"",
        png(),
        pdf("hi"),
        b"\xff\xd8\xff\xe0\x00\x10JFIF\x00",
        b"GIF89a",
        b"RIFF\x24\x00\x00\x00WEBPVP8 ",
        b"PK\x03\x04",
        b"\x7fELF",
        b"%PDF-",
    ]
)
BODIES = st.one_of(st.binary(max_size=300), st.text(max_size=100).map(str.encode))


def verdict(data: bytes, cuts: list[int], declared: str, name: str) -> tuple[int, str, str]:
    inspector = Inspector()
    start = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        inspector.feed(data[start:cut])
        start = cut
    inspector.feed(data[start:])
    try:
        found = inspector.content_type(declared, name)
    except Unprocessable as refused:
        found = f"422 {refused.code}"
    return inspector.size, inspector.sha256, found


@given(MAGIC, BODIES, st.lists(st.integers(0, 10_000), max_size=6), DECLARED, NAMES)
def test_any_chunking_gives_the_whole_files_verdict(
    magic: bytes, body: bytes, cuts: list[int], declared: str, name: str
) -> None:
    data = magic + body
    size, sha256, found = verdict(data, cuts, declared, name)

    assert (size, sha256, found) == verdict(data, [], declared, name)
    assert size == len(data) and sha256 == hashlib.sha256(data).hexdigest()
    assert found in ACCEPTED or found in ("422 unsupported_content_type", "422 content_type_mismatch")
    if found in TEXT_TYPES:
        assert b"\x00" not in data and data.decode("utf-8") is not None
    if found in IMAGE_TYPES or found == PDF:
        assert data[:4] in (png()[:4], b"\xff\xd8\xff\xe0", b"GIF8", b"RIFF", b"%PDF"), data[:8]

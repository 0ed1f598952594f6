"""What a file is, from its bytes: the declared content type is a claim to check, never the answer.

Binary types are recognised by puremagic (pure Python, so it runs on Lambda without libmagic); text
has no magic number, so a file is text when all of it is UTF-8 without NUL bytes, and then the declared
type (or the name's extension) says which text it is. Only what the model can be shown is accepted:
PNG, JPEG, GIF and WebP images, PDF, CSV, JSON, Markdown and plain text.
"""

from __future__ import annotations

import codecs
import hashlib
import mimetypes
from dataclasses import dataclass, field

import puremagic

from stepwise.core.errors import Unprocessable

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PDF = "application/pdf"
TEXT_TYPES = frozenset({"text/plain", "text/csv", "application/json", "text/markdown"})
ACCEPTED = IMAGE_TYPES | {PDF} | TEXT_TYPES
HEAD_BYTES = 8192  # what the magic numbers are looked for in
# Claims that say nothing about the bytes (what a client sends when it does not know).
_UNKNOWN = frozenset({"application/octet-stream", "binary/octet-stream"})
# Spellings of the accepted types that clients send, to their one name.
_ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "application/csv": "text/csv",
    "text/x-csv": "text/csv",
    "text/json": "application/json",
    "text/x-markdown": "text/markdown",
}


def _base(content_type: str) -> str:
    base = content_type.split(";", 1)[0].strip().lower()
    return _ALIASES.get(base, base)


@dataclass
class Inspector:
    """Fed a file's bytes in order: its size, SHA-256 and whether all of it is UTF-8 text, in one pass,
    so a 50 MB upload is never held whole."""

    head: bytearray = field(default_factory=bytearray)
    size: int = 0
    text: bool = True
    _hash: hashlib._Hash = field(default_factory=hashlib.sha256)
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")()
    )

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self._hash.update(chunk)
        if len(self.head) < HEAD_BYTES:
            self.head += chunk[: HEAD_BYTES - len(self.head)]
        if self.text:
            self.text = b"\x00" not in chunk and self._decodes(chunk, final=False)

    def _decodes(self, chunk: bytes, *, final: bool) -> bool:
        try:
            self._decoder.decode(chunk, final=final)
        except UnicodeDecodeError:
            return False
        return True

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def content_type(self, declared: str, name: str) -> str:
        """The file's type; 422 when it is none we accept or not what `declared` claims."""
        if self.text:
            self.text = self._decodes(b"", final=True)  # a multibyte character cut off at the end
        found = _binary_type(bytes(self.head))
        claimed = _base(declared)
        if found is None and self.text and self.size:
            found = _text_type(claimed, name, bytes(self.head))
        if found is None:
            raise Unprocessable(
                f"{name}: the content is not a type this API takes (PNG, JPEG, GIF, WebP, PDF, CSV, "
                "JSON, Markdown or UTF-8 text)",
                code="unsupported_content_type",
                details={"name": name, "declared": declared},
            )
        if (
            claimed not in _UNKNOWN
            and claimed != found
            and not (claimed in TEXT_TYPES and found in TEXT_TYPES)
        ):
            raise Unprocessable(
                f"{name} is declared {claimed} but its content is {found}",
                code="content_type_mismatch",
                details={"name": name, "declared": claimed, "detected": found},
            )
        return found


def _binary_type(head: bytes) -> str | None:
    try:
        matches = puremagic.magic_string(head)
    except (puremagic.PureError, ValueError):
        return None
    for match in matches:  # best first
        found = _base(match.mime_type)
        if found in IMAGE_TYPES or found == PDF:
            return found
    return None


def _text_type(claimed: str, name: str, head: bytes) -> str:
    """Which text: the claim when it is a text type we take, else the name's, else plain text. JSON
    must at least look like JSON (its first character), so a CSV that says it is JSON is caught."""
    guessed = _base(mimetypes.guess_type(name, strict=False)[0] or "")
    kind = claimed if claimed in TEXT_TYPES else guessed if guessed in TEXT_TYPES else "text/plain"
    if kind == "application/json":
        first = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")[:1]
        if first not in ("{", "[", '"') and claimed == "application/json":
            raise Unprocessable(
                f"{name} is declared application/json but its content is not JSON",
                code="content_type_mismatch",
                details={"name": name, "declared": claimed, "detected": "text/plain"},
            )
        if first not in ("{", "[", '"'):
            kind = "text/plain"
    return kind

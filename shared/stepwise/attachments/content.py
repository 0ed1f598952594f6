"""An attachment's content as text: a PDF's extracted text (kept beside the file once extracted), a
text file decoded, a CSV's rows. Shared by what the model is shown and by `attachment_read`."""

from __future__ import annotations

import csv
import io
import threading
from collections import OrderedDict

from stepwise.attachments import blobs
from stepwise.attachments.models import Attachment
from stepwise.attachments.sniff import IMAGE_TYPES, PDF

CACHE_BYTES = 64 * 1024 * 1024  # of file bytes kept in a warm function, so each step does not re-read S3

_cache: OrderedDict[str, bytes] = OrderedDict()
_cached_bytes = 0
_lock = threading.Lock()


class Missing(LookupError):
    """The file is no longer stored (erased, or past retention)."""


def raw(tenant_id: str, run_id: str, attachment: Attachment, *, cache: bool = True) -> bytes:
    """The file's bytes, from the function's cache or S3. Only an active run's files may be cached
    (`cache`): an ended run's can be erased at any time, and a warm function must not show them after."""
    global _cached_bytes
    key = blobs.attachment_key(tenant_id, run_id, attachment.attachment_id)
    with _lock:
        found = _cache.get(key) if cache else None
        if found is not None:
            _cache.move_to_end(key)
            return found
    data = blobs.read(key)
    if data is None:
        raise Missing(attachment.attachment_id)
    if not cache:
        return data
    with _lock:
        _cache[key] = data
        _cached_bytes += len(data)
        while _cached_bytes > CACHE_BYTES and len(_cache) > 1:
            _, dropped = _cache.popitem(last=False)
            _cached_bytes -= len(dropped)
    return data


def is_image(attachment: Attachment) -> bool:
    return attachment.content_type in IMAGE_TYPES


def text(tenant_id: str, run_id: str, attachment: Attachment, *, cache: bool = True) -> str:
    """The attachment as text (not for images). A PDF's text is extracted once and kept next to it."""
    if attachment.content_type != PDF:
        return raw(tenant_id, run_id, attachment, cache=cache).decode("utf-8-sig", errors="replace")
    key = blobs.derived_key(tenant_id, run_id, attachment.attachment_id)
    kept = blobs.read(key)
    if kept is not None:
        return kept.decode()
    extracted = pdf_text(raw(tenant_id, run_id, attachment, cache=cache))
    blobs.put(key, extracted.encode(), "text/plain; charset=utf-8")
    return extracted


def pdf_text(data: bytes) -> str:
    """Each page's text under a `--- page N ---` line. A PDF pypdf cannot read gives a note instead:
    the run goes on, and the model can say it could not read the file."""
    from pypdf import PdfReader  # the model step alone imports it
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        return f"[the PDF could not be read: {type(exc).__name__}]"
    if not any(p.strip() for p in pages):
        return f"[the PDF has {len(pages)} pages but no extractable text (it may be scanned images)]"
    return "\n".join(f"--- page {i} ---\n{p.strip()}" for i, p in enumerate(pages, start=1))


def csv_rows(body: str) -> tuple[list[str], list[list[str]]]:
    """A CSV's header and data rows, in the dialect csv.Sniffer finds (comma when it finds none)."""
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(body[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows = list(csv.reader(io.StringIO(body), dialect))
    return (rows[0], rows[1:]) if rows else ([], [])

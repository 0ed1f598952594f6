"""An attachment's content as text: a PDF's extracted text (kept beside the file once extracted), a
text file decoded, a CSV's rows. Shared by what the model is shown and by `attachment_read`."""

from __future__ import annotations

import csv
import io
import threading
import time
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


# Bounds of a PDF's text extraction (review finding 2). pypdf interprets every content-stream operator in
# Python, and a page's stream is compressed: a kilobyte of PDF can hold tens of thousands of `Tj`
# operators (~0.26 s per KB of PDF, linear), so an inline-sized file could outlast the step's timeout.
PDF_MAX_PAGES = 100
PDF_MAX_CHARS = 500_000  # of text kept; attachment_read pages through it
PDF_MAX_PAGE_CONTENT = 1_000_000  # decompressed bytes of one page's content stream (~1.5 s to extract)
PDF_SECONDS = 10.0  # CPU the whole extraction may take, checked at every operator


class _Stop(Exception):
    """Raised from pypdf's per-operator callback once the extraction's time is spent."""


def pdf_text(data: bytes, *, seconds: float = PDF_SECONDS) -> str:
    """Each page's text under a `--- page N ---` line, bounded in pages, characters, content per page
    and time (what was left out is said in a note). A PDF pypdf cannot read gives a note instead: the
    run goes on, and the model can say it could not read the file."""
    from pypdf import PdfReader  # the model step alone imports it
    from pypdf.errors import PyPdfError

    # process_time, not wall time: a busy machine must not cut a file short that fits its budget.
    deadline = time.process_time() + seconds

    def check_time(*_: object) -> None:
        if time.process_time() > deadline:
            raise _Stop

    pages: list[str] = []
    notes: list[str] = []
    chars = 0
    try:
        reader = PdfReader(io.BytesIO(data))
        count = len(reader.pages)
        for number, page in enumerate(reader.pages[:PDF_MAX_PAGES], start=1):
            contents = page.get_contents()
            if contents is not None and len(contents.get_data()) > PDF_MAX_PAGE_CONTENT:
                pages.append(f"[page {number} has too much content to extract]")
                continue
            try:
                check_time()
                extracted = (page.extract_text(visitor_operand_before=check_time) or "").strip()
            except _Stop:
                notes.append(f"[text extraction stopped at page {number} after {seconds:g} s of CPU]")
                break
            if chars + len(extracted) > PDF_MAX_CHARS:
                pages.append(extracted[: PDF_MAX_CHARS - chars])
                notes.append(f"[text cut at {PDF_MAX_CHARS} characters, in page {number}]")
                break
            chars += len(extracted)
            pages.append(extracted)
        else:
            if count > PDF_MAX_PAGES:
                notes.append(f"[only the first {PDF_MAX_PAGES} of {count} pages are extracted]")
    except (PyPdfError, ValueError, KeyError, TypeError) as exc:
        return f"[the PDF could not be read: {type(exc).__name__}]"
    if not any(p.strip() for p in pages) and not notes:
        return f"[the PDF has {count} pages but no extractable text (it may be scanned images)]"
    shown = "\n".join(f"--- page {i} ---\n{p}" for i, p in enumerate(pages, start=1))
    return "\n".join([shown, *notes]) if shown else "\n".join(notes)


def csv_rows(body: str) -> tuple[list[str], list[list[str]]]:
    """A CSV's header and data rows, in the dialect csv.Sniffer finds (comma when it finds none)."""
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(body[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows = list(csv.reader(io.StringIO(body), dialect))
    return (rows[0], rows[1:]) if rows else ([], [])

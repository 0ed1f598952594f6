"""Small real files for attachment tests: a PNG any decoder reads, a one-page PDF with text."""

from __future__ import annotations

import struct
import zlib


def png(width: int = 2, height: int = 2, *, padding: int = 0) -> bytes:
    """A valid RGB PNG; `padding` adds that many bytes in an ancillary chunk (a bigger file that
    decodes the same)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    extra = chunk(b"teXt", b"pad\x00" + b"x" * padding) if padding else b""
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + extra
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def pdf(text: str) -> bytes:
    """A one-page PDF that shows `text` in Helvetica (the xref table's offsets computed, so strict
    readers take it too)."""
    return pdf_of([f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()])


def pdf_of(streams: list[bytes], *, compress: bool = False) -> bytes:
    """A PDF with one page per content stream (Flate-compressed with `compress`, as a hostile file's
    would be: a few KB can then hold megabytes of operators)."""
    font = 3 + 2 * len(streams)  # the last object
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(f"{3 + 2 * i} 0 R".encode() for i in range(len(streams)))
        + f"] /Count {len(streams)} >>".encode(),
    ]
    for i, stream in enumerate(streams):
        body = zlib.compress(stream, 9) if compress else stream
        flate = b" /Filter /FlateDecode" if compress else b""
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R ".encode()
            + f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(
            b"<< /Length " + str(len(body)).encode() + flate + b" >>\nstream\n" + body + b"\nendstream"
        )
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)

"""Attachments without AWS: what a file is from its bytes, the local S3 endpoint's check of presigned
URLs, how large text files are described."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.config import Config

from stepwise.attachments import content, render
from stepwise.attachments.models import Attachment
from stepwise.attachments.sniff import Inspector
from stepwise.core.errors import Unprocessable
from stepwise_local.s3 import refusal
from tests.fakes.files import pdf, pdf_of, png


def sniffed(data: bytes, declared: str, name: str = "file", chunk: int = 7) -> str:
    inspector = Inspector()
    for start in range(0, len(data), chunk):  # fed in pieces, as an upload is read
        inspector.feed(data[start : start + chunk])
    return inspector.content_type(declared, name)


@pytest.mark.parametrize(
    ("data", "declared", "name", "expected"),
    [
        (png(), "image/png", "a.png", "image/png"),
        (png(), "application/octet-stream", "a", "image/png"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01" + b"\x00" * 64, "image/jpg", "a.jpg", "image/jpeg"),
        (b"GIF89a" + b"\x00" * 64, "image/gif", "a.gif", "image/gif"),
        (b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 64, "image/webp", "a.webp", "image/webp"),
        (pdf("hi"), "application/pdf", "a.pdf", "application/pdf"),
        ("naïve,café\n1,2\n".encode(), "text/csv", "a.csv", "text/csv"),
        (b'{"a": 1}', "application/octet-stream", "a.json", "application/json"),
        (b"a,b\n", "text/plain", "a.csv", "text/plain"),  # one text type for another is fine
        (b"# Title\n", "application/octet-stream", "notes.md", "text/markdown"),
    ],
)
def test_the_bytes_decide_the_type(data: bytes, declared: str, name: str, expected: str) -> None:
    assert sniffed(data, declared, name) == expected


@pytest.mark.parametrize(
    ("data", "declared", "code"),
    [
        (b"plain words", "image/png", "content_type_mismatch"),
        (png(), "text/csv", "content_type_mismatch"),
        (pdf("x"), "image/png", "content_type_mismatch"),
        (b"a,b\n1,2\n", "application/json", "content_type_mismatch"),
        (b"PK\x03\x04" + b"\x00" * 40, "application/zip", "unsupported_content_type"),
        (b"caf\xe9\n", "text/plain", "unsupported_content_type"),  # Latin-1, not UTF-8
        (b"a\x00b", "text/plain", "unsupported_content_type"),
        ("é".encode()[:1], "text/plain", "unsupported_content_type"),  # cut inside a character
    ],
)
def test_a_claim_the_bytes_do_not_back_is_refused(data: bytes, declared: str, code: str) -> None:
    with pytest.raises(Unprocessable) as refused:
        sniffed(data, declared)
    assert refused.value.code == code


def test_size_and_hash_are_of_the_whole_file() -> None:
    import hashlib

    data = png(padding=50_000)
    inspector = Inspector()
    for start in range(0, len(data), 4096):
        inspector.feed(data[start : start + 4096])
    assert inspector.size == len(data) and inspector.sha256 == hashlib.sha256(data).hexdigest()
    assert len(inspector.head) == 8192  # only the head is kept


# --- The local S3 endpoint -----------------------------------------------------------------------


@pytest.fixture
def presigned(monkeypatch: pytest.MonkeyPatch) -> tuple[str, dict[str, str]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    client = boto3.client(
        "s3",
        region_name="us-east-1",
        # Explicit: a moto mock still active from another test would otherwise sign with its own keys.
        aws_access_key_id="testing",
        aws_secret_access_key="secret",
        endpoint_url="http://127.0.0.1:9",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    params = {"Bucket": "b", "Key": "tenants/t/uploads/u", "ContentType": "image/png", "ContentLength": 70}
    url = client.generate_presigned_url("put_object", Params=params, ExpiresIn=900)
    return url, {"Content-Type": "image/png", "Content-Length": "70", "Host": "127.0.0.1:9"}


def test_a_presigned_put_as_signed_is_served(presigned: tuple[str, dict[str, str]]) -> None:
    url, headers = presigned
    assert refusal("PUT", url, headers) is None


def test_a_presigned_put_with_other_headers_does_not_match(presigned: tuple[str, dict[str, str]]) -> None:
    url, headers = presigned
    refused = refusal("PUT", url, {**headers, "Content-Length": "71"})
    assert refused is not None and b"SignatureDoesNotMatch" in refused
    assert refusal("GET", url, headers) is not None  # signed for PUT only


def test_a_presigned_put_after_its_expiry_is_refused(presigned: tuple[str, dict[str, str]]) -> None:
    url, headers = presigned
    later = datetime.now(UTC) + timedelta(minutes=16)
    refused = refusal("PUT", url, headers, now=later)
    assert refused is not None and b"Request has expired" in refused


# --- Descriptions --------------------------------------------------------------------------------


def attachment(content_type: str) -> Attachment:
    return Attachment(
        attachment_id="att_01M8S2PNV05FXCCABV6809PNXS",
        name="f",
        content_type=content_type,
        size=1,
        sha256="0",
    )


def test_a_large_json_array_is_described_by_its_shape() -> None:
    body = "[" + ",".join(f'{{"n": {i}}}' for i in range(5000)) + "]"
    described = render.describe(attachment("application/json"), body)
    assert described.startswith(f"A JSON array of 5000 items. {len(body)} characters")
    assert body[: render.PREVIEW_CHARS] in described and body[render.PREVIEW_CHARS :] not in described
    assert "attachment_read with attachment_id att_01M8S2PNV05FXCCABV6809PNXS" in described


def test_a_semicolon_csv_is_read_in_its_dialect() -> None:
    rows = "".join(f"{i};x{i}\n" for i in range(100))
    described = render.describe(attachment("text/csv"), "id;name\n" + rows)
    assert "A CSV of 100 rows and 2 columns: id, name." in described
    assert "19,x19" in described and "20,x20" not in described


def test_a_deeply_nested_json_file_is_described_not_a_failed_run() -> None:
    # Review finding 4: json.loads raised RecursionError here, which failed the run.
    body = "[" * 100_000 + "]" * 100_000
    described = render.describe(attachment("application/json"), body)
    assert described.startswith(f"{len(body)} characters, 1 lines.")


# Review finding 2: pypdf interprets each operator in Python, and a compressed stream holds many per byte.
def test_a_page_whose_content_is_too_large_is_not_extracted() -> None:
    bomb = b"BT /F1 12 Tf 72 720 Td " + b"(ab) Tj " * 150_000 + b"ET"  # 1.2 MB of operators
    data = pdf_of([bomb, b"BT /F1 12 Tf 72 720 Td (second) Tj ET"], compress=True)
    assert len(data) < 5_000
    assert content.pdf_text(data) == (
        "--- page 1 ---\n[page 1 has too much content to extract]\n--- page 2 ---\nsecond"
    )


def test_extraction_stops_when_its_time_is_spent() -> None:
    heavy = b"BT /F1 12 Tf 72 720 Td " + b"(ab) Tj " * 30_000 + b"ET"  # under the size cap, ~0.4 s of CPU
    text = content.pdf_text(
        pdf_of([b"BT /F1 12 Tf 72 720 Td (first) Tj ET", heavy], compress=True), seconds=0.05
    )
    assert text.startswith("--- page 1 ---\nfirst\n")
    assert text.endswith("[text extraction stopped at page 2 after 0.05 s of CPU]")
    assert "abab" not in text


def test_extracted_text_and_pages_are_capped() -> None:
    long = b"BT /F1 12 Tf 72 720 Td (" + b"x" * (content.PDF_MAX_CHARS + 10) + b") Tj ET"
    text = content.pdf_text(pdf_of([long]))
    assert text.split("\n")[1] == "x" * content.PDF_MAX_CHARS
    assert text.endswith(f"[text cut at {content.PDF_MAX_CHARS} characters, in page 1]")
    many = content.pdf_text(pdf_of([b"BT /F1 12 Tf 72 720 Td (p) Tj ET"] * (content.PDF_MAX_PAGES + 1)))
    assert f"--- page {content.PDF_MAX_PAGES} ---" in many
    assert f"--- page {content.PDF_MAX_PAGES + 1} ---" not in many
    assert many.endswith(
        f"[only the first {content.PDF_MAX_PAGES} of {content.PDF_MAX_PAGES + 1} pages are extracted]"
    )


def test_one_model_call_reads_images_only_up_to_its_byte_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    # Review finding 2's memory path: 20 images of 50 MB would all be read and base64'd into one step.
    from stepwise.llm.client import SCRIPTED

    size = 8 * 1024 * 1024
    images = [
        Attachment(
            attachment_id=f"att_01M8S2PNV05FXCCABV6809PN{i}S",
            name=f"{i}.png",
            content_type="image/png",
            size=size,
            sha256="0",
        )
        for i in range(4)
    ]
    read: list[str] = []

    def raw(tenant_id: str, run_id: str, attachment: Attachment, *, cache: bool = True) -> bytes:
        read.append(attachment.attachment_id)
        return b"\x00" * attachment.size

    monkeypatch.setattr(content, "raw", raw)
    message = {
        "role": "user",
        "content": "look",
        render.EXTENSION: {"run_id": "run_1", "attachment_ids": [a.attachment_id for a in images]},
    }
    parts = render.expand([message], tenant_id="t", model=SCRIPTED, listed=lambda _: images)[0]["content"]
    shown = [p for p in parts if p["type"] == "image_url"]
    budget = render.IMAGE_BYTES_PER_CALL // size
    assert len(shown) == budget and read == [a.attachment_id for a in images[:budget]]
    assert parts[-1]["text"].endswith("not shown, this call already carries its limit of images]")

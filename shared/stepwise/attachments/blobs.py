"""The S3 side of attachments: keys under the tenant's prefix, presigned PUTs, copies, reads, and
erasure of every version (the bucket is versioned, and a deletion that left old versions behind would
not be one).

A presigned URL is signed by the client in `presigner()`: in AWS the regional endpoint; locally the
loopback S3 endpoint the local stack serves (STEPWISE_LOCAL_S3_URL), since an app outside the process
cannot reach moto's in-process S3 at the real endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any
from urllib.parse import quote, unquote

from botocore.config import Config as BotoConfig

from stepwise.core import aws, config, s3
from stepwise.core.errors import Unavailable
from stepwise.core.s3 import RUN_RETENTION, UPLOAD_RETENTION, tagging

LOCAL_S3_ENV = config.Storage.variable("local_s3_url")
NAME_META = "name"  # x-amz-meta-name: the upload's file name, percent-encoded (metadata is ASCII)
CHUNK = 1024 * 1024


def bucket() -> str:
    name = s3.bucket()
    if name is None:
        raise Unavailable(
            f"attachments need storage: the {s3.BUCKET_ENV} environment variable is not set",
            code="storage_not_configured",
        )
    return name


def upload_key(tenant_id: str, upload_id: str) -> str:
    return f"{s3.tenant_root(tenant_id)}uploads/{upload_id}"


def run_prefix(tenant_id: str, run_id: str) -> str:
    return f"{s3.tenant_root(tenant_id)}runs/{run_id}/attachments/"


def attachment_key(tenant_id: str, run_id: str, attachment_id: str) -> str:
    return f"{run_prefix(tenant_id, run_id)}{attachment_id}"


def derived_key(tenant_id: str, run_id: str, attachment_id: str) -> str:
    """Where the text the model reads of an attachment (a PDF's) is kept once extracted."""
    return f"{attachment_key(tenant_id, run_id, attachment_id)}.txt"


@cache
def presigner() -> Any:
    """The client that signs upload URLs (path-style on a local endpoint, which has no bucket hosts)."""
    endpoint = config.storage().local_s3_url
    style = {"addressing_style": "path"} if endpoint else {}
    return aws.client("s3", endpoint_url=endpoint, config=BotoConfig(signature_version="s3v4", s3=style))


def reset() -> None:
    presigner.cache_clear()


def presign_put(
    key: str, *, content_type: str, size: int, name: str, expires: int
) -> tuple[str, dict[str, str]]:
    """A PUT URL for exactly this file: its type, length, name and retention tag are signed headers,
    so S3 refuses a body of another size (the 50 MB bound holds without trusting the client)."""
    quoted = quote(name, safe="")
    params: dict[str, Any] = {
        "Bucket": bucket(),
        "Key": key,
        "ContentType": content_type,
        "ContentLength": size,
        "Metadata": {NAME_META: quoted},
        "Tagging": tagging(UPLOAD_RETENTION),
    }
    url = presigner().generate_presigned_url("put_object", Params=params, ExpiresIn=expires)
    headers = {
        "Content-Type": content_type,
        "Content-Length": str(size),
        f"x-amz-meta-{NAME_META}": quoted,
        "x-amz-tagging": params["Tagging"],
    }
    return url, headers


def _client() -> Any:
    return s3.s3_client()


def head(key: str) -> dict[str, Any] | None:
    client = _client()
    try:
        found: dict[str, Any] = client.head_object(Bucket=bucket(), Key=key)
    except client.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
    return found


def uploaded_name(found: dict[str, Any]) -> str | None:
    name = (found.get("Metadata") or {}).get(NAME_META)
    return unquote(name) if name else None


def chunks(key: str, *, etag: str | None = None) -> Iterator[bytes]:
    """The object's bytes, a chunk at a time (at this ETag when given)."""
    extra = {"IfMatch": etag} if etag else {}
    body = _client().get_object(Bucket=bucket(), Key=key, **extra)["Body"]
    try:
        yield from body.iter_chunks(CHUNK)
    finally:
        body.close()


def read(key: str) -> bytes | None:
    client = _client()
    try:
        data: bytes = client.get_object(Bucket=bucket(), Key=key)["Body"].read()
    except client.exceptions.NoSuchKey:
        return None
    return data


def put(key: str, data: bytes, content_type: str) -> None:
    _client().put_object(
        Bucket=bucket(), Key=key, Body=data, ContentType=content_type, Tagging=tagging(RUN_RETENTION)
    )


def put_upload(key: str, data: bytes, content_type: str, name: str) -> None:
    """A file written as an upload (a trigger's email attachment), named as a presigned PUT names it."""
    _client().put_object(
        Bucket=bucket(),
        Key=key,
        Body=data,
        ContentType=content_type,
        Metadata={NAME_META: quote(name, safe="")},
        Tagging=tagging(UPLOAD_RETENTION),
    )


def copy(source: str, target: str, content_type: str, *, etag: str | None = None) -> None:
    """A server-side copy, tagged for the run's retention (at the ETag the caller hashed, if given)."""
    extra = {"CopySourceIfMatch": etag} if etag else {}
    name = bucket()
    _client().copy_object(
        Bucket=name,
        Key=target,
        CopySource={"Bucket": name, "Key": source},
        ContentType=content_type,
        MetadataDirective="REPLACE",
        Tagging=tagging(RUN_RETENTION),
        TaggingDirective="REPLACE",
        **extra,
    )


def erase(prefix: str) -> int:
    """Delete every version and delete marker under `prefix`; how many objects there were."""
    client, name = _client(), bucket()
    erased: set[str] = set()
    for page in client.get_paginator("list_object_versions").paginate(Bucket=name, Prefix=prefix):
        doomed = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
        ]
        erased.update(v["Key"] for v in page.get("Versions", []))
        for start in range(0, len(doomed), 1000):  # DeleteObjects takes 1,000 keys a call
            client.delete_objects(
                Bucket=name, Delete={"Objects": doomed[start : start + 1000], "Quiet": True}
            )
    return len(erased)


def delete(key: str) -> None:
    """An upload once it has been copied under a run (its versions too: it is the same file)."""
    erase(key)

"""The bucket every file of Stepwise lives in: its name, the tenant prefix every key starts with, the
S3 client, and the retention tags the lifecycle rules select on. Attachments, large results and the
storage tools share it."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from botocore.config import Config as BotoConfig

from stepwise.core import aws, config

BUCKET_ENV = config.Storage.variable("bucket")
TENANTS_PREFIX = "tenants/"
_TENANT_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")


# Lifecycle rules select on this tag (a rule's prefix cannot reach under every tenant's folder), and
# tests/contract/test_storage_lifecycle.py holds template.yaml's rules to these values. What the model
# writes with storage_write is the tenant's own and carries no tag: it stays until deleted.
RETENTION_TAG = "stepwise-retention"
RUN_RETENTION = "run"  # a run's files, derived text and large results: expire with its events (EventsTtlDays)
UPLOAD_RETENTION = "upload"  # a presigned upload no run took: expires UPLOAD_RETENTION_DAYS after its PUT
UPLOAD_RETENTION_DAYS = 1


def tagging(retention: str) -> str:
    return f"{RETENTION_TAG}={retention}"


@cache
def s3_client() -> Any:
    """Built on first use and kept for the warm Lambda. SigV4, which presigned URLs for objects encrypted
    with KMS require."""
    return aws.client("s3", config=BotoConfig(signature_version="s3v4"))


def reset() -> None:
    """Forget the cached client (tests build it inside their moto context)."""
    s3_client.cache_clear()


def bucket() -> str | None:
    return config.storage().bucket


def tenant_root(tenant_id: str) -> str:
    """`tenants/{tenant_id}/`. The tenant id comes from the authorizer; one that could change the
    prefix's shape is a bug upstream, not something to work around."""
    if not _TENANT_ID.fullmatch(tenant_id) or tenant_id in (".", ".."):
        raise ValueError(f"tenant id {tenant_id!r} cannot name a storage prefix")
    return f"{TENANTS_PREFIX}{tenant_id}/"

"""Tool results too large for the conversation and the event log: the whole text is kept in S3 and
referenced, while the model reads the cut text (TOOL_RESULT_LIMIT characters) and clients the cut
copy in the `tool_result` event. Nothing a tool answered is lost to a limit."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger

from stepwise.core import s3

logger = Logger(service="stepwise")

OFFLOAD_CHARS = 50_000  # past this a result's text no longer travels whole in a message or an event


def key_for(tenant_id: str, run_id: str, tool_call_id: str) -> str:
    return f"{s3.tenant_root(tenant_id)}results/{run_id}/{tool_call_id}.txt"


def offload(tenant_id: str, run_id: str, tool_call_id: str, text: str) -> dict[str, Any] | None:
    """Store the whole text and return its reference; None when it is small enough to travel whole,
    or when no bucket is configured (then only the cut text survives, as before there was S3)."""
    if len(text) <= OFFLOAD_CHARS:
        return None
    bucket = s3.bucket()
    if bucket is None:
        logger.warning("a large tool result is kept cut: no storage bucket", extra={"chars": len(text)})
        return None
    key = key_for(tenant_id, run_id, tool_call_id)
    body = text.encode()
    s3.s3_client().put_object(
        Bucket=bucket,
        Key=key,
        Body=body,
        ContentType="text/plain; charset=utf-8",
        Tagging=s3.tagging(s3.RUN_RETENTION),  # kept as long as the events that cite it
    )
    return {"key": key, "chars": len(text), "bytes": len(body)}


def read(tenant_id: str, run_id: str, tool_call_id: str) -> str | None:
    """The whole text of an offloaded result of this tenant's run (None when there is none)."""
    bucket = s3.bucket()
    if bucket is None:
        return None
    client = s3.s3_client()
    try:
        found = client.get_object(Bucket=bucket, Key=key_for(tenant_id, run_id, tool_call_id))
    except client.exceptions.NoSuchKey:
        return None
    text: str = found["Body"].read().decode()
    return text

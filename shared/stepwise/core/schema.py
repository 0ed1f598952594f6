"""What every pydantic model at Stepwise's edges shares: strict bodies and aware timestamps."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict


def utcnow() -> datetime:
    return datetime.now(UTC)


class Strict(BaseModel):
    """Request bodies reject unknown fields, so a typo is a 422 rather than a silently ignored setting."""

    model_config = ConfigDict(extra="forbid")

"""Settings as the API takes and returns them. A value is write-only: no model here carries one out."""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, Field

from stepwise.core.schema import Strict

# Environment-variable style: EXA_API_KEY, DATABASE_URL. The one rule: the API's path parameter and
# `is_valid_key` both read it.
KEY_PATTERN = r"^[A-Z][A-Z0-9_]{0,63}$"
MAX_VALUE_CHARS = 16_384  # room for a PEM key or a service-account JSON; at most 64 KB as UTF-8

_KEY = re.compile(KEY_PATTERN)


def is_valid_key(key: str) -> bool:
    return _KEY.fullmatch(key) is not None


class SettingPut(Strict):
    value: str = Field(min_length=1, max_length=MAX_VALUE_CHARS)


class SettingInfo(BaseModel):
    """A setting's name and when it last changed; never its value."""

    key: str
    updated_at: datetime


class SettingList(BaseModel):
    settings: list[SettingInfo]

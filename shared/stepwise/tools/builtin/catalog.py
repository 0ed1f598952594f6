"""The builtin tools by name. Modules load on first use: the API validates a builtin's name and
config without importing every provider's client (SQLAlchemy, sqlglot, boto3 for Bedrock...)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

BUILTINS: dict[str, str] = {
    name: f"stepwise.tools.builtin.{name}"
    for name in (
        "attachment_read",
        "code_execute",
        "database_query",
        "database_write",
        "http_request",
        "knowledge_search",
        "storage_read",
        "storage_write",
        "web_scrape",
        "web_search",
    )
}


class UnknownBuiltin(ValueError):
    pass


def load(name: str) -> ModuleType:
    if name not in BUILTINS:
        raise UnknownBuiltin(f"no builtin tool {name!r}; the builtins are {', '.join(sorted(BUILTINS))}")
    return importlib.import_module(BUILTINS[name])


def declaration(name: str) -> dict[str, Any]:
    module = load(name)
    return {"name": module.NAME, "description": module.DESCRIPTION, "parameters": module.INPUT_SCHEMA}

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
        "database_schema",
        "database_write",
        "http_request",
        "kb_doc_read",
        "kb_list_docs",
        "knowledge_search",
        "result_read",
        "storage_read",
        "storage_write",
        "web_scrape",
        "web_search",
    )
}
# Builtins an agent gets from a setting rather than from its tool list: the memory tools come with
# `memory.enabled`, for runs that name a user (stepwise.loop.recall).
MEMORY_TOOLS: tuple[str, ...] = ("memory_delete", "memory_save", "memory_search")
IMPLIED: dict[str, str] = {name: f"stepwise.tools.builtin.{name}" for name in MEMORY_TOOLS}


class UnknownBuiltin(ValueError):
    pass


def load(name: str) -> ModuleType:
    path = BUILTINS.get(name) or IMPLIED.get(name)
    if path is None:
        raise UnknownBuiltin(f"no builtin tool {name!r}; the builtins are {', '.join(sorted(BUILTINS))}")
    return importlib.import_module(path)


def check_declarable(name: str) -> None:
    """An agent's tool list names only BUILTINS; an implied builtin there is refused with the setting
    that brings it."""
    if name in MEMORY_TOOLS:
        raise UnknownBuiltin(f"{name} comes with the agent's memory setting: set memory.enabled instead")
    load(name)


def declaration(name: str) -> dict[str, Any]:
    module = load(name)
    return {"name": module.NAME, "description": module.DESCRIPTION, "parameters": module.INPUT_SCHEMA}

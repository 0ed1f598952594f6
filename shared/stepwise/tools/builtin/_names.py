"""Table and schema names as configured for the database builtins, read with sqlglot."""

from __future__ import annotations

import logging

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

# sqlglot warns about syntax it only half understands by quoting the SQL, and here that SQL is the
# model's (with whatever it copied into it): it must not reach the function's log. What sqlglot could
# not read reaches the model as our own error instead. Set here because every module of ours that
# parses SQL imports this one.
logging.getLogger("sqlglot").setLevel(logging.CRITICAL)


def name_parts(entry: str, dialect: str | None = None) -> list[exp.Identifier]:
    """The identifiers of a configured name ("orders", "public.orders"); [] when it is not one."""
    try:
        table = sqlglot.parse_one(entry, into=exp.Table, read=dialect)
    except SqlglotError:
        return []
    parts = [table.args.get(key) for key in ("catalog", "db", "this")]
    if not all(part is None or isinstance(part, exp.Identifier) for part in parts):
        return []
    return [part for part in parts if isinstance(part, exp.Identifier)]

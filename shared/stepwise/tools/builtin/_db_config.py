"""What database_query and database_write declare: their arguments and their per-agent config.

Light on purpose (no sqlglot, no SQLAlchemy, about a second of imports between them): whoever only
lists or validates tools does not load what runs them. sqlglot loads when a config is validated,
SQLAlchemy when a statement runs.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

QUERY_LIMIT = 20_000  # characters of SQL the model may send


class QueryArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=QUERY_LIMIT, description="One SQL statement.")


class TableAccess(BaseModel):
    """The tables a database tool may touch: `allowed_tables` by name ("orders" or "public.orders"),
    and every non-catalog table of each schema in `allowed_schemas`. Empty lists allow no table.
    Names are compared as the database resolves them (see `_sql`)."""

    model_config = ConfigDict(extra="forbid")

    allowed_tables: list[str] = Field(default_factory=list)
    allowed_schemas: list[str] = Field(default_factory=list)

    @field_validator("allowed_tables")
    @classmethod
    def _table_names(cls, entries: list[str]) -> list[str]:
        from stepwise.tools.builtin._names import name_parts  # sqlglot loads only where tables are named

        for entry in entries:
            if not 1 <= len(name_parts(entry)) <= 2:
                raise ValueError(f"{entry!r} is not a table name (table or schema.table)")
        return entries

    @field_validator("allowed_schemas")
    @classmethod
    def _schema_names(cls, entries: list[str]) -> list[str]:
        from stepwise.tools.builtin._names import name_parts

        for entry in entries:
            if len(name_parts(entry)) != 1:
                raise ValueError(f"{entry!r} is not a schema name")
        return entries

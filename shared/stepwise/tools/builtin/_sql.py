"""Checking the model's SQL before anything runs it (database_query, database_write): pure, no database.

sqlglot parses the statement in the database's dialect. A statement passes when it is exactly one
statement of the kind the tool runs, nests no other statement (no data-modifying CTE, no SELECT ... INTO),
calls only functions on the dialect's allowlist (`_sql_functions`: what a reporting query needs), casts
only to plain value types, and every row source it names is a table on the tool's allowlist. What runs
afterwards is sqlglot's rendering of the checked tree, never the model's text: a comment, a string or a
statement boundary that sqlglot and the database would read differently cannot smuggle anything past
the check.

Every form that names or produces rows is a table reference: a table in FROM, JOIN, a subquery or a CTE
body, and SQLite's `expr IN table` (which sqlglot keeps as a column, not a table). Row sources that are
not a table name (a function in FROM or under LATERAL, ROWS FROM, UNNEST, XMLTABLE, SQLite's
`x IN json_each(...)`) are refused: what they read is not a name the allowlist can check.

Tables are compared by normalized name, as the database resolves them: identifiers fold the way the
dialect folds them (PostgreSQL lowercases unquoted ones and keeps quoted ones; SQLite ignores ASCII case
either way; MySQL's table names are compared exactly, as on a Linux server: on a server that ignores
case that refuses a differently spelled name of an allowed table, never the other way round), and an
unqualified name gets the schema it resolves to (`main` in SQLite; `public` in PostgreSQL, except
`pg_*` names, which PostgreSQL finds in `pg_catalog` first; the URL's database in MySQL). So in
PostgreSQL `"orders"`, `ORDERS` and `public.orders` are the same table, and `"public.orders"` (one quoted
identifier) is not.
A name that refers to a CTE in scope is not a table; a DML target always is.

These checks keep an honest model inside its grant and give it errors it can act on; they are not the
security boundary. The boundary is the database role in DATABASE_URL, one per agent, granted only what
the agent's allowlist names (see `_database` for the grants).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect, NormalizationStrategy
from sqlglot.errors import ParseError, SqlglotError

from stepwise.tools.builtin._db_config import QUERY_LIMIT, TableAccess
from stepwise.tools.builtin._names import name_parts
from stepwise.tools.builtin._sql_functions import FUNCTIONS, called_name, cast_allowed

# Statements, and parts of statements, that neither tool runs anywhere in its tree.
_NESTED_STATEMENTS: tuple[type[exp.Expr], ...] = (
    exp.DML,  # INSERT, UPDATE, DELETE, MERGE, COPY
    exp.DDL,
    exp.Drop,
    exp.Alter,
    exp.TruncateTable,
    exp.Command,  # whatever sqlglot could not parse into a known statement
    exp.Pragma,
    exp.Attach,
    exp.Detach,
    exp.Set,
    exp.Transaction,
    exp.Commit,
    exp.Rollback,
    exp.Grant,
    exp.Revoke,
    exp.Analyze,
    exp.Use,
    exp.Describe,
)


class Refused(Exception):
    """The statement may not run: `code` and `message` are what the model reads."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Flavor:
    """What the checks need to know about one kind of database."""

    backend: str  # SQLAlchemy's backend name
    dialect: str  # sqlglot's dialect name
    default_schema: str  # where an unqualified table lives

    def schema_of_unqualified(self, name: str) -> str:
        if self.backend == "postgresql" and name.startswith("pg_"):
            return "pg_catalog"  # searched before the search_path, so it wins for every pg_* name
        return self.default_schema

    def is_system(self, schema: str, name: str) -> bool:
        """Catalog tables: allowed only by name in allowed_tables, never through allowed_schemas."""
        if self.backend == "sqlite":
            return name.startswith("sqlite_")
        if self.backend == "mysql":
            return schema in _MYSQL_SYSTEM_SCHEMAS
        return schema in ("pg_catalog", "information_schema") or schema.startswith("pg_")


# MySQL's schemas are its databases; an unqualified table is in the URL's database (`_db_target.flavor_of`
# fills default_schema in from it), and these hold the server's catalog, accounts and statistics.
_MYSQL_SYSTEM_SCHEMAS = frozenset({"information_schema", "mysql", "performance_schema", "sys"})

FLAVORS: dict[str, Flavor] = {
    "sqlite": Flavor(backend="sqlite", dialect="sqlite", default_schema="main"),
    "postgresql": Flavor(backend="postgresql", dialect="postgres", default_schema="public"),
    "mysql": Flavor(backend="mysql", dialect="mysql", default_schema=""),
}


class Allowlist:
    """A TableAccess resolved for one database flavor."""

    def __init__(self, access: TableAccess, flavor: Flavor) -> None:
        self.flavor = flavor
        self._fold = folder(flavor.dialect)
        self._tables: set[tuple[str, str]] = set()
        for entry in access.allowed_tables:
            parts = [self._fold(part) for part in name_parts(entry, flavor.dialect)]
            if len(parts) == 1:
                self._tables.add((flavor.schema_of_unqualified(parts[0]), parts[0]))
            elif len(parts) == 2:
                self._tables.add((parts[0], parts[1]))
            else:
                raise Refused("not_configured", f"allowed_tables: {entry!r} is not a table name")
        self._schemas = {
            self._fold(part) for entry in access.allowed_schemas for part in name_parts(entry, flavor.dialect)
        }
        self.listing = ", ".join(access.allowed_tables + [f"{s}.*" for s in access.allowed_schemas])

    @property
    def tables(self) -> frozenset[tuple[str, str]]:
        """The allowed tables by name, as (schema, table), folded as the database folds them."""
        return frozenset(self._tables)

    @property
    def schemas(self) -> frozenset[str]:
        """The schemas all of whose non-catalog tables are allowed, folded."""
        return frozenset(self._schemas)

    def fold(self, identifier: exp.Identifier) -> str:
        return self._fold(identifier)

    def check(self, table: exp.Table) -> None:
        shown = exp.table_name(table, dialect=self.flavor.dialect)
        if table.args.get("catalog") is not None:
            raise self._refuse(f"{shown}: database-qualified names are not allowed")
        name = self._fold(table.this)
        db = table.args.get("db")
        schema = self._fold(db) if isinstance(db, exp.Identifier) else self.flavor.schema_of_unqualified(name)
        if (schema, name) in self._tables:
            return
        if schema in self._schemas and not self.flavor.is_system(schema, name):
            return
        raise self._refuse(f"table {shown} is not allowed")

    def _refuse(self, message: str) -> Refused:
        allowed = f"allowed: {self.listing}" if self.listing else "this tool allows no tables"
        return Refused("table_not_allowed", f"{message} ({allowed})")


def folder(dialect: str) -> Callable[[exp.Identifier], str]:
    """How `dialect` compares identifiers. Only ASCII letters fold, as in SQLite and PostgreSQL (Python's
    str.lower would also fold, say, the Kelvin sign into a 'k' that the database keeps apart)."""
    strategy = Dialect.get_or_raise(dialect).normalization_strategy

    def fold(identifier: exp.Identifier) -> str:
        text: str = identifier.this
        if strategy in (
            NormalizationStrategy.CASE_INSENSITIVE,
            NormalizationStrategy.CASE_INSENSITIVE_UPPERCASE,
        ):
            return text.translate(_ASCII_LOWER)
        if identifier.quoted or strategy is NormalizationStrategy.CASE_SENSITIVE:
            return text
        if strategy is NormalizationStrategy.UPPERCASE:
            return text.translate(_ASCII_UPPER)
        return text.translate(_ASCII_LOWER)

    return fold


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


# --- The two checks ---------------------------------------------------------------------------------


def check_query(sql: str, allowlist: Allowlist) -> str:
    """The SQL to run for a database_query: one SELECT (or set operation of SELECTs) that writes nothing."""
    statement = _one_statement(sql, allowlist.flavor)
    if not isinstance(statement, exp.Query):
        raise Refused("statement_not_allowed", f"only SELECT is allowed here, not {_kind(statement)}")
    for node in statement.walk():
        if isinstance(node, exp.Into):
            raise Refused("statement_not_allowed", "SELECT ... INTO creates a table: not allowed here")
        if isinstance(node, exp.Lock):
            raise Refused("statement_not_allowed", "locking clauses (FOR UPDATE, FOR SHARE) are not allowed")
    return _checked(statement, allowlist)


def check_write(sql: str, allowlist: Allowlist) -> str:
    """The SQL to run for a database_write: one INSERT, UPDATE or DELETE; UPDATE and DELETE with a WHERE
    that reads a column (so `WHERE 1 = 1` does not count); no upsert or replace fed by a query.

    These refusals are early feedback on the text; the bound that holds whatever the WHERE says is on
    the outcome: `_database` rolls back a write that changed more than `max_rows_affected` rows."""
    statement = _one_statement(sql, allowlist.flavor)
    if not isinstance(statement, exp.Insert | exp.Update | exp.Delete):
        raise Refused(
            "statement_not_allowed", f"only INSERT, UPDATE or DELETE is allowed here, not {_kind(statement)}"
        )
    if isinstance(statement, exp.Update | exp.Delete):
        where = statement.args.get("where")
        if where is None or where.find(exp.Column) is None:
            verb = "UPDATE" if isinstance(statement, exp.Update) else "DELETE"
            raise Refused(
                "where_required",
                f"{verb} needs a WHERE clause on the rows' columns (no mass {verb.lower()}s)",
            )
    if isinstance(statement, exp.Insert) and _rewrites_from_query(statement):
        raise Refused(
            "statement_not_allowed",
            "an upsert or replace whose rows come from a query (INSERT ... SELECT with ON CONFLICT DO "
            "UPDATE, INSERT OR REPLACE ... SELECT) is not allowed: insert from VALUES, or UPDATE with "
            "a WHERE",
        )
    return _checked(statement, allowlist)


def _rewrites_from_query(insert: exp.Insert) -> bool:
    """Whether an INSERT changes existing rows (upsert or replace) for each row a query yields: how
    many rows that touches depends on the data, not on the statement."""
    if not isinstance(insert.expression, exp.Query):
        return False  # VALUES: as many rows as the statement spells out
    if str(insert.args.get("alternative") or "").upper() == "REPLACE":
        return True
    conflict = insert.args.get("conflict")
    if not isinstance(conflict, exp.OnConflict):
        return False
    return bool(
        conflict.args.get("duplicate")
        or conflict.expressions
        or "UPDATE" in str(conflict.args.get("action")).upper()
    )


def _one_statement(sql: str, flavor: Flavor) -> exp.Expr:
    if len(sql) > QUERY_LIMIT:
        raise Refused("invalid_query", f"the statement is longer than {QUERY_LIMIT} characters")
    statements = _parse(sql, flavor)
    if not statements:
        raise Refused("invalid_query", "no SQL statement given")
    if len(statements) > 1:
        raise Refused("invalid_query", "exactly one statement is allowed (found several separated by ';')")
    return statements[0]


def _parse(sql: str, flavor: Flavor) -> list[exp.Expr]:
    try:
        parsed = sqlglot.parse(sql, read=flavor.dialect)
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" (line {first['line']}, column {first['col']})" if "line" in first else ""
        raise Refused("invalid_query", f"{first.get('description') or 'not valid SQL'}{where}") from None
    except SqlglotError as exc:
        raise Refused("invalid_query", f"not valid SQL: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise Refused("invalid_query", "the statement is nested too deeply") from None
    # An empty statement (`;;`, or a comment after the last `;`) is no statement.
    return [s for s in parsed if s is not None and not isinstance(s, exp.Semicolon)]


def _checked(statement: exp.Expr, allowlist: Allowlist) -> str:
    dialect = allowlist.flavor.dialect
    _in_table_as_table(statement)
    for node in statement.walk():
        if node is not statement and isinstance(node, _NESTED_STATEMENTS):
            raise Refused("statement_not_allowed", f"a nested {_kind(node)} is not allowed")
        if isinstance(node, exp.SessionParameter | exp.Parameter):
            # MySQL's @@datadir and kin are its current_setting(); @user variables carry state from one
            # statement (of another tool call, on a pooled connection) into the next.
            raise Refused(
                "statement_not_allowed",
                f"variables are not allowed: {_shown(node, allowlist.flavor.dialect)}",
            )
        _check_row_source(node)
        if isinstance(node, exp.Func):
            _check_function(node, dialect)
    for table in tables_touched(statement, folder(dialect)):
        allowlist.check(table)
    try:
        return statement.sql(dialect=dialect, comments=False)
    except SqlglotError as exc:
        raise Refused("invalid_query", f"cannot run this statement: {str(exc).splitlines()[0]}") from None


def _check_function(node: exp.Func, dialect: str) -> None:
    if isinstance(node.parent, exp.Dot) and node.parent.expression is node:
        raise Refused(
            "function_not_allowed", f"schema-qualified functions are not allowed: {node.parent.sql()}"
        )
    if isinstance(node, exp.Cast | exp.TryCast) and not cast_allowed(node.args.get("to")):
        target = node.args.get("to")
        shown = target.sql(dialect=dialect) if isinstance(target, exp.Expr) else "?"
        raise Refused("function_not_allowed", f"casts to {shown} are not allowed (plain value types only)")
    if isinstance(node, exp.UDTF) and not isinstance(node, exp.Lateral | exp.Values):
        raise Refused(
            "function_not_allowed", f"set-returning functions are not allowed: {_shown(node, dialect)}"
        )
    name = called_name(node, dialect)
    if name is not None and name not in FUNCTIONS[dialect]:
        raise Refused("function_not_allowed", f"the function {name} is not allowed")


def _check_row_source(node: exp.Expr) -> None:
    """A row source must be a table name or a subquery: LATERAL only over a subquery, no function in FROM.
    Checked on the way down, so a table function is refused as such before its name is judged."""
    if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier):
        raise Refused("table_not_allowed", f"table functions are not allowed: {_shown(node.this, None)}")
    if isinstance(node, exp.Lateral) and not isinstance(node.this, exp.Subquery):
        raise Refused("table_not_allowed", f"LATERAL is only allowed over a subquery: {_shown(node, None)}")
    if isinstance(node, exp.From | exp.Join) and not isinstance(
        node.this, exp.Table | exp.Subquery | exp.Values | exp.Lateral
    ):
        raise Refused("table_not_allowed", f"table functions are not allowed: {_shown(node.this, None)}")


def _in_table_as_table(statement: exp.Expr) -> None:
    """SQLite reads `x IN name` (no parentheses) as a lookup in the table (or CTE) `name`, and
    `x IN f(...)` as one in a table-valued function; sqlglot keeps the name as a column. Make the name the
    table it is, so the table checks see it, and refuse the function."""
    for node in list(statement.find_all(exp.In)):
        field = node.args.get("field")
        if field is None:
            continue
        if not isinstance(field, exp.Column) or not isinstance(field.this, exp.Identifier):
            raise Refused("table_not_allowed", f"table functions are not allowed: {_shown(field, None)}")
        node.set(
            "field",
            exp.Table(this=field.this, db=field.args.get("table"), catalog=field.args.get("db")),
        )


def _shown(node: object, dialect: str | None) -> str:
    text = node.sql(dialect=dialect) if isinstance(node, exp.Expr) else str(node)
    return text if len(text) <= 80 else text[:80] + "…"


def _kind(node: exp.Expr) -> str:
    if isinstance(node, exp.Command):
        return str(node.this).upper()
    return node.key.upper()


# --- Tables -------------------------------------------------------------------------------------------


def tables_touched(statement: exp.Expr, fold: Callable[[exp.Identifier], str]) -> Iterator[exp.Table]:
    """Every real table `statement` reads or writes: in joins, subqueries and CTE bodies, but not a name
    that refers to a CTE in scope. A table function in FROM (`pragma_table_info(...)`,
    `generate_series(...)`) is refused: what it reads is not a table name to check."""
    targets = {id(target) for target in _dml_targets(statement)}
    for table in statement.find_all(exp.Table):
        if id(table) in targets:
            yield table
            continue
        if not isinstance(table.this, exp.Identifier):
            raise Refused("table_not_allowed", f"table functions are not allowed: {_shown(table.this, None)}")
        if not _refers_to_cte(table, fold):
            yield table


def _dml_targets(statement: exp.Expr) -> list[exp.Table]:
    """The tables a DML statement writes: never a CTE, even when one has the same name."""
    if not isinstance(statement, exp.Insert | exp.Update | exp.Delete):
        return []
    target = statement.this
    if isinstance(target, exp.Schema):  # INSERT INTO t (a, b)
        target = target.this
    extra = statement.args.get("tables") or []  # DELETE t1, t2 FROM ... (MySQL)
    return [t for t in [target, *extra] if isinstance(t, exp.Table)]


def _refers_to_cte(table: exp.Table, fold: Callable[[exp.Identifier], str]) -> bool:
    """Whether an unqualified name resolves to a CTE. Walking out from the table, a WITH's CTEs are in
    scope of its statement's body; inside a CTE's own definition only the CTEs before it are (and itself,
    when the WITH is RECURSIVE). Anything else is a table: a mistake here errs toward checking more."""
    if table.args.get("db") is not None or table.args.get("catalog") is not None:
        return False
    name = fold(table.this)
    child: exp.Expr = table
    node = table.parent
    while node is not None:
        if isinstance(node, exp.With):
            position = next((i for i, cte in enumerate(node.expressions) if cte is child), None)
            if position is None:
                visible: list[exp.Expr] = []
            else:
                visible = node.expressions[: position + (1 if node.args.get("recursive") else 0)]
        else:
            with_ = node.args.get("with_")
            visible = with_.expressions if isinstance(with_, exp.With) and with_ is not child else []
        if any(_cte_name(cte, fold) == name for cte in visible):
            return True
        child, node = node, node.parent
    return False


def _cte_name(cte: exp.Expr, fold: Callable[[exp.Identifier], str]) -> str | None:
    alias = cte.args.get("alias")
    identifier = alias.this if isinstance(alias, exp.TableAlias) else None
    return fold(identifier) if isinstance(identifier, exp.Identifier) else None

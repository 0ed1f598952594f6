"""The functions and cast types the model's SQL may use, per dialect: an allowlist, not a denylist.

A reporting query needs aggregates, window functions, string, date, math and conditional functions and
casts to plain types; nothing else is allowed. A name is judged as it is written in the SQL that runs
(sqlglot's rendering of the checked tree in the database's dialect, see `_sql`), so an alias the
parser normalizes (`ifnull` to COALESCE, `strpos` to POSITION) is judged by what the database will
actually call. Left out on purpose, whatever they are useful for:

- anything that runs SQL given as text or names a table, a file or a setting in an argument
  (PostgreSQL's query_to_xml family, xpath, ts_stat, dblink, current_setting/set_config,
  has_*_privilege, pg_relation_size, to_regclass, nextval; SQLite's load_extension, readfile; MySQL's
  load_file, extractvalue/updatexml; its @@variables are refused in `_sql`), so no string can reach
  past the table allowlist;
- the catalog, session and activity functions (pg_*, sqlite_*, version(), MySQL's database(), user(),
  connection_id(), found_rows()) and table-valued or set-returning functions (generate_series,
  unnest, json_each, regexp_matches, json_table): a row source is a table reference, and those are
  refused in `_sql` unless they are an allowlisted table;
- functions that wait or hold server state (MySQL's sleep, benchmark, get_lock, master_pos_wait);
- functions whose output size the caller chooses (repeat, lpad, rpad, space, format, printf,
  zeroblob, randomblob): one call could build a gigabyte value the result cap only sees once it is in
  memory;
- schema-qualified calls (`pg_catalog.lower(x)`, `public.f(x)`): a tenant's own functions are not
  allowlisted names, and the real boundary for them is the database role (see `_database`).
"""

from __future__ import annotations

import re

from sqlglot import exp

_COMMON = frozenset(
    {
        # aggregates
        "count", "sum", "avg", "min", "max",
        # window functions
        "row_number", "rank", "dense_rank", "ntile", "lag", "lead", "first_value", "last_value",
        "nth_value", "percent_rank", "cume_dist",
        # conditional and casts (CASE, COALESCE ... render as syntax or as these names)
        "coalesce", "nullif", "cast",
        # strings
        "lower", "upper", "length", "substring", "substr", "trim", "ltrim", "rtrim", "replace",
        "concat", "concat_ws",
        # math
        "abs", "round", "ceil", "ceiling", "floor", "sqrt", "power", "pow", "exp", "ln", "log",
        "log10", "sign", "mod", "random",
    }
)  # fmt: skip

FUNCTIONS: dict[str, frozenset[str]] = {
    "sqlite": _COMMON
    | {
        "total", "group_concat", "ifnull", "iif", "instr", "char", "unicode", "hex", "typeof",
        "glob", "like", "trunc", "pi",
        "date", "time", "datetime", "julianday", "strftime", "unixepoch",
        "json_extract", "json_array_length", "json_type", "json_valid",
    },
    "postgres": _COMMON
    | {
        # aggregates
        "string_agg", "array_agg", "json_agg", "jsonb_agg", "json_object_agg", "jsonb_object_agg",
        "bool_and", "bool_or", "every", "stddev", "stddev_pop", "stddev_samp", "variance",
        "var_pop", "var_samp", "corr", "covar_pop", "covar_samp", "regr_slope", "regr_intercept",
        "regr_r2", "percentile_cont", "percentile_disc", "mode",
        # dates and times
        "date_trunc", "date_part", "extract", "age", "to_char", "to_date", "to_timestamp",
        "to_number", "make_date", "make_time", "make_timestamp", "make_interval", "date_bin",
        "justify_days", "justify_hours", "justify_interval", "isfinite",
        # strings
        "initcap", "left", "right", "position", "strpos", "split_part", "btrim", "reverse", "md5",
        "chr", "ascii", "starts_with", "char_length", "character_length", "octet_length",
        "translate", "regexp_replace", "regexp_match", "regexp_count", "regexp_substr", "regexp_like",
        # math
        "trunc", "div", "cbrt", "pi", "degrees", "radians", "width_bucket", "greatest", "least",
        "gcd", "lcm",
        # JSON and arrays (values of the row, never a row source)
        "json_build_object", "jsonb_build_object", "json_build_array", "jsonb_build_array",
        "to_json", "to_jsonb", "json_extract_path", "jsonb_extract_path", "json_extract_path_text",
        "jsonb_extract_path_text", "json_typeof", "jsonb_typeof", "json_array_length",
        "jsonb_array_length", "array_length", "array_to_string", "array_position", "cardinality",
    },
    # As sqlglot's mysql dialect renders them (IFNULL as COALESCE, INSTR as LOCATE, STD as STDDEV_POP).
    "mysql": _COMMON
    | {
        # aggregates (GROUP_CONCAT is cut at the server's group_concat_max_len)
        "group_concat", "bit_and", "bit_or", "bit_xor", "stddev_pop", "stddev_samp", "var_pop",
        "var_samp", "json_arrayagg", "json_objectagg",
        # conditional
        "if",
        # strings
        "char_length", "octet_length", "bit_length", "mid", "substring_index", "left", "right",
        "locate", "reverse", "field", "find_in_set", "elt", "strcmp", "ascii", "ord", "hex", "unhex",
        "md5", "sha", "sha2", "char", "insert", "soundex",
        "regexp_replace", "regexp_like", "regexp_instr", "regexp_substr",
        # dates and times
        "now", "current_timestamp", "current_time", "sysdate", "utc_timestamp", "utc_time", "date",
        "time", "timestamp", "year", "month", "day", "dayofmonth", "dayofweek", "dayofyear", "week",
        "weekday", "weekofyear", "yearweek", "quarter", "hour", "minute", "second", "microsecond",
        "dayname", "date_format", "time_format", "str_to_date", "date_add", "date_sub", "adddate",
        "subdate", "addtime", "subtime", "datediff", "timestampdiff", "timediff", "last_day",
        "makedate", "maketime", "unix_timestamp", "from_unixtime", "from_days", "extract",
        "convert_tz", "sec_to_time", "time_to_sec", "period_add", "period_diff",
        # math
        "truncate", "greatest", "least", "pi", "degrees", "radians", "crc32", "conv", "rand", "sin",
        "cos", "tan", "cot", "asin", "acos", "atan", "atan2",
        # JSON (values of the row, never a row source: JSON_TABLE is refused as a table function)
        "json_extract", "json_unquote", "json_object", "json_array", "json_length", "json_type",
        "json_valid", "json_contains", "json_contains_path", "json_keys", "json_depth", "json_search",
        "json_quote", "json_overlaps", "json_member_of",
    },
}  # fmt: skip

_T = exp.DataType.Type
# Casts to plain value types only: a cast to regclass, regproc and the like looks up the catalog by
# name (an oracle for tables that are not allowed), and a user-defined type runs the tenant's code.
CAST_TYPES = frozenset(
    {
        _T.BOOLEAN, _T.TINYINT, _T.SMALLINT, _T.INT, _T.BIGINT, _T.DECIMAL, _T.FLOAT, _T.DOUBLE,
        _T.MONEY, _T.CHAR, _T.NCHAR, _T.VARCHAR, _T.NVARCHAR, _T.TEXT, _T.DATE, _T.TIME, _T.TIMETZ,
        _T.DATETIME, _T.TIMESTAMP, _T.TIMESTAMPTZ, _T.INTERVAL, _T.JSON, _T.JSONB, _T.UUID,
        _T.ARRAY,
    }
)  # fmt: skip

# A call as sqlglot renders it: a name, quoted or not, then "(".
_CALLED = re.compile(r"""\s*["`\[]?([A-Za-z_][A-Za-z0-9_$]*)["`\]]?\s*\(""")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def called_name(node: exp.Func, dialect: str) -> str | None:
    """The function `node` calls in the SQL that runs, lowercased; None when it renders as syntax
    (CASE ... END, `a -> 'k'`, CURRENT_DATE, an operator) rather than as a call.

    A function sqlglot does not know (Anonymous) is judged by its name exactly as written, quoted or
    not: SQLite ignores case even in quoted names, so `"ZEROBLOB"(...)` is zeroblob."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).translate(_ASCII_LOWER)
    match = _CALLED.match(node.sql(dialect=dialect, comments=False))
    return match.group(1).lower() if match else None


def cast_allowed(target: object) -> bool:
    """Whether a cast's target is a plain value type (arrays of them included)."""
    if not isinstance(target, exp.DataType) or target.this not in CAST_TYPES:
        return False
    nested = [e for e in target.expressions if not isinstance(e, exp.DataTypeParam)]
    return all(cast_allowed(e) for e in nested)

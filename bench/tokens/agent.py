"""The bench's BI agent: a real Stepwise `Agent` (instructions, custom HTTP tools, builtins), so its tool
declarations come from stepwise.loop.prompt exactly as a run's would."""

from __future__ import annotations

from typing import Any

from stepwise.agents.models import Agent
from stepwise.core.schema import utcnow

INSTRUCTIONS = """\
You are the analytics assistant of a retail company. You answer questions about sales, orders, \
products, web traffic and the company's dashboards, using only the data your tools return.

How to work:
- Find the data first. Prefer the metrics API (query_metric, get_metric) for defined KPIs; use \
database_query for anything the metrics do not cover, with a WHERE clause that selects only what the \
question needs. Never invent a number: every figure you give comes from a tool result of this \
conversation.
- Dashboards belong to their owners. Read them freely; change them only when the user asks, and say \
what you changed.
- Dates are ISO 8601 (YYYY-MM-DD). Money is in EUR with two decimals. Regions are north, south, east \
and west.
- When a result is large, look at its columns and the rows you need instead of reading everything.
- For computations over many rows, use code_execute with Python rather than doing arithmetic by hand.
- Answer in a short paragraph: the answer first, then the figures that support it, then any caveat \
(missing data, a filter you had to assume). Quote order ids, SKUs and tracking numbers exactly.
- If the question is ambiguous, state the reading you chose and answer it; ask back only when no \
reading is reasonable.
- Reports go to storage under reports/, as Markdown, and you give the user the path.
"""


def _http(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "http",
        "name": name,
        "description": description,
        "input_schema": {"type": "object", "properties": properties, "required": required},
        "endpoint": f"https://bi.example.com/api/{name}",
        "read_only": name.startswith(("get_", "list_", "query_")),
    }


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


PERIOD = _s(
    "Time window: last_7_days, last_30_days, this_month, last_month, this_quarter, this_year, or a "
    "range start..end in ISO dates.",
)

HTTP_TOOLS = [
    _http(
        "get_order",
        "Fetch one order by id: status, carrier, tracking number, ETA, items and total.",
        {"order_id": _s("The order id, like o-1042.")},
        ["order_id"],
    ),
    _http(
        "list_dashboards",
        "List the dashboards visible to the user, optionally those of one owner.",
        {"owner": _s("Owner's email address."), "limit": {"type": "integer", "minimum": 1, "maximum": 100}},
        [],
    ),
    _http(
        "get_dashboard",
        "Fetch a dashboard: title, owner, widgets (kind, metric, period), last update.",
        {"dashboard_id": _s("The dashboard id, like d-77.")},
        ["dashboard_id"],
    ),
    _http(
        "create_dashboard",
        "Create a dashboard owned by the user, with an optional list of widgets.",
        {
            "title": _s("Title shown at the top."),
            "widgets": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "kind": _s("kpi, line, bar, pie or table."),
                        "metric": _s("A metric name."),
                        "period": PERIOD,
                    },
                    "required": ["kind", "metric"],
                },
            },
        },
        ["title"],
    ),
    _http(
        "update_widget",
        "Change one widget of a dashboard: its kind, metric or period.",
        {
            "dashboard_id": _s("The dashboard."),
            "widget_id": _s("The widget."),
            "kind": _s("New kind."),
            "metric": _s("New metric."),
            "period": PERIOD,
        },
        ["dashboard_id", "widget_id"],
    ),
    _http(
        "share_dashboard",
        "Share a dashboard with people by email, as viewers or editors.",
        {
            "dashboard_id": _s("The dashboard."),
            "emails": {"type": "array", "items": _s("An email address.")},
            "role": _s("viewer or editor.", enum=["viewer", "editor"]),
        },
        ["dashboard_id", "emails"],
    ),
    _http(
        "query_metric",
        "Compute a defined metric over a period, optionally grouped by a dimension "
        "(region, product, channel, status). Returns one row per group.",
        {
            "metric": _s("A metric name: revenue, orders, units, revenue_by_region, aov, return_rate."),
            "period": PERIOD,
            "group_by": _s("Dimension to group by."),
        },
        ["metric"],
    ),
    _http(
        "get_metric",
        "Read a metric's definition: what it counts, its unit and its filters.",
        {"metric": _s("The metric name.")},
        ["metric"],
    ),
    _http(
        "list_alerts",
        "List the alerts set on metrics, with their thresholds and who gets notified.",
        {"metric": _s("Only the alerts of this metric.")},
        [],
    ),
    _http(
        "send_report",
        "Email a report stored under reports/ to a list of recipients.",
        {
            "path": _s("The report's path."),
            "to": {"type": "array", "items": _s("An email address.")},
            "subject": _s("Subject line."),
        },
        ["path", "to"],
    ),
    _http(
        "forecast",
        "Forecast a metric for the next periods from its daily history.",
        {"metric": _s("The metric."), "horizon_days": {"type": "integer", "minimum": 1, "maximum": 365}},
        ["metric", "horizon_days"],
    ),
]
BUILTINS = [
    {"name": "database_query", "config": {"allowed_tables": ["orders", "products"]}},
    {"name": "storage_read"},
    {"name": "storage_write"},
    {"name": "code_execute"},
    {"name": "web_search"},
]


def agent() -> Agent:
    now = utcnow()
    return Agent.model_validate(
        {
            "name": "bi-assistant",
            "agent_id": "agt_bench",
            "created_at": now,
            "updated_at": now,
            "system_prompt": INSTRUCTIONS,
            "tools": [*HTTP_TOOLS, *BUILTINS],
        }
    )

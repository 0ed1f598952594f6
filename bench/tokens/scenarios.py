"""Five conversations of a BI agent, shaped like the field report's (a lookup, a dashboard question, a
five-turn chat, a three-question conversation, a long analysis over big tables), and a JSON API answering
500 rows through a custom HTTP tool (issue 27), scripted call by call.

Each turn is one run: the user's message, the model's steps (tool calls with the results the tools give,
then the answer), and the quality checks: the facts the answering call must see (from the turn's own
results) and, implicitly, every earlier answer of the conversation. A `Read` step is the model paging a
described table with result_read: it happens only where the table reached the model as a description
(in the naive replay the model already holds the whole table and skips it).

Data are generated from fixed seeds, so every replay sends the same bytes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

REGIONS = ("north", "south", "east", "west")
PRODUCTS = ("atlas", "beacon", "cirrus", "delta", "ember", "fjord", "garnet", "harbor")


@dataclass(frozen=True)
class Call:
    tool: str
    arguments: dict[str, Any]
    result: Any  # what the tool answers (a str is sent as is, anything else as JSON)


@dataclass(frozen=True)
class Read:
    """The model pages a described table: result_read on the `call`-th call of the turn so far."""

    call: int
    offset: int
    limit: int


@dataclass(frozen=True)
class Turn:
    user: str
    steps: list[list[Call] | Read]  # tool-calling steps, in order; the answer follows them
    answer: str
    facts: list[str] = field(default_factory=list)  # what the answering call must see


@dataclass(frozen=True)
class Scenario:
    name: str
    turns: list[Turn]


# --- Data ------------------------------------------------------------------------------------------


def orders(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "order_id": f"o-{seed:02d}{i:04d}",
            "date": f"2026-{(i % 12) + 1:02d}-{(i % 28) + 1:02d}",
            "region": rng.choice(REGIONS),
            "product": rng.choice(PRODUCTS),
            "units": rng.randint(1, 40),
            "revenue": round(rng.uniform(20, 4_000), 2),
            "status": rng.choice(("shipped", "delivered", "returned", "pending")),
        }
        for i in range(count)
    ]


def traffic_csv(days: int, seed: int) -> str:
    rng = random.Random(seed)
    lines = ["day,channel,sessions,signups,bounce_rate"]
    for i in range(days):
        for channel in ("organic", "paid", "email", "social"):
            sessions = rng.randint(200, 9_000)
            lines.append(
                f"2026-{(i // 28) % 12 + 1:02d}-{i % 28 + 1:02d},{channel},{sessions},"
                f"{rng.randint(2, sessions // 20)},{rng.uniform(0.2, 0.8):.3f}"
            )
    return "\n".join(lines) + "\n"


def products(seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    rows = [
        [
            f"p-{i:04d}",
            f"{rng.choice(PRODUCTS)} {i}",
            rng.choice(("hardware", "software", "service")),
            round(rng.uniform(5, 900), 2),
            rng.randint(0, 500),
        ]
        for i in range(350)
    ]
    return {"columns": ["sku", "name", "category", "price", "stock"], "rows": rows, "truncated": False}


def region_totals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    totals: dict[str, dict[str, float]] = {}
    for row in rows:
        entry = totals.setdefault(row["region"], {"revenue": 0.0, "units": 0})
        entry["revenue"] += row["revenue"]
        entry["units"] += row["units"]
    return [
        {"region": region, "revenue": round(t["revenue"], 2), "units": int(t["units"])}
        for region, t in sorted(totals.items())
    ]


def dashboard(dashboard_id: str) -> dict[str, Any]:
    return {
        "dashboard_id": dashboard_id,
        "title": "Sales overview",
        "owner": "maria@example.com",
        "widgets": [
            {"widget_id": f"w{i}", "kind": kind, "metric": metric, "period": "last_30_days"}
            for i, (kind, metric) in enumerate(
                [
                    ("kpi", "revenue"),
                    ("line", "orders"),
                    ("bar", "revenue_by_region"),
                    ("table", "top_products"),
                ]
            )
        ],
        "updated_at": "2026-11-28T09:12:00Z",
    }


# --- The five scenarios ---------------------------------------------------------------------------


def _lookup() -> Scenario:
    order = {
        "order_id": "o-1042",
        "status": "shipped",
        "carrier": "DHL",
        "tracking": "JD014600003SE",
        "eta": "2026-12-03",
        "items": 3,
        "total": 184.5,
    }
    return Scenario(
        "one-question lookup",
        [
            Turn(
                "Where is order o-1042?",
                [[Call("get_order", {"order_id": "o-1042"}, order)]],
                "Order o-1042 shipped with DHL (tracking JD014600003SE), due 2026-12-03.",
                facts=["JD014600003SE", "2026-12-03"],
            ),
        ],
    )


def _dashboard_question() -> Scenario:
    rows = orders(420, seed=7)
    totals = region_totals(rows)
    best = max(totals, key=lambda t: t["revenue"])
    late = rows[333]
    return Scenario(
        "dashboard question",
        [
            Turn(
                "On the sales dashboard, which region sold the most last month, and what is order "
                f"{late['order_id']}'s status?",
                [
                    [
                        Call(
                            "list_dashboards",
                            {"owner": "maria@example.com"},
                            [
                                {"dashboard_id": "d-77", "title": "Sales overview"},
                                {"dashboard_id": "d-78", "title": "Ops"},
                            ],
                        )
                    ],
                    [Call("get_dashboard", {"dashboard_id": "d-77"}, dashboard("d-77"))],
                    [
                        Call(
                            "query_metric", {"metric": "revenue_by_region", "period": "last_30_days"}, totals
                        ),
                        Call("database_query", {"query": "SELECT * FROM orders WHERE month = 11"}, rows),
                    ],
                    Read(call=3, offset=330, limit=10),
                ],
                f"{best['region'].title()} sold the most ({best['revenue']} over {best['units']} "
                f"units); order {late['order_id']} is {late['status']}.",
                facts=[best["region"], str(best["revenue"]), late["order_id"], late["status"]],
            ),
        ],
    )


def _chat() -> Scenario:
    questions = [
        (
            "What does the revenue KPI count?",
            "get_metric",
            {"metric": "revenue"},
            {"metric": "revenue", "definition": "sum of order totals net of refunds", "unit": "EUR"},
            "Revenue is the sum of order totals net of refunds, in EUR.",
            ["net of refunds"],
        ),
        (
            "And orders?",
            "get_metric",
            {"metric": "orders"},
            {"metric": "orders", "definition": "count of orders not cancelled", "unit": "orders"},
            "Orders counts every order that was not cancelled.",
            ["not cancelled"],
        ),
        (
            "Who owns the sales dashboard?",
            "get_dashboard",
            {"dashboard_id": "d-77"},
            dashboard("d-77"),
            "Maria (maria@example.com) owns it.",
            ["maria@example.com"],
        ),
        (
            "When was it last updated?",
            None,
            None,
            None,
            "It was last updated on 2026-11-28 at 09:12 UTC.",
            [],
        ),
        (
            "Thanks, summarize what we said.",
            None,
            None,
            None,
            "Revenue is net of refunds, orders exclude cancellations, and Maria owns the dashboard.",
            [],
        ),
    ]
    turns = [
        Turn(q, [[Call(tool, args, result)]] if tool else [], answer, facts)
        for q, tool, args, result, answer, facts in questions
    ]
    return Scenario("chat of five turns", turns)


def _three_questions() -> Scenario:
    rows = orders(400, seed=11)
    totals = region_totals(rows)
    best = max(totals, key=lambda t: t["revenue"])
    csv_text = traffic_csv(84, seed=12)
    catalog = products(seed=13)
    low = min(catalog["rows"], key=lambda r: r[4])
    row_250 = catalog["rows"][250]
    traffic_line = csv_text.splitlines()[300].split(",")
    return Scenario(
        "three-question conversation",
        [
            Turn(
                "Which region brought the most revenue this year?",
                [
                    [Call("database_query", {"query": "SELECT * FROM orders WHERE year = 2026"}, rows)],
                    [Call("query_metric", {"metric": "revenue_by_region", "period": "this_year"}, totals)],
                ],
                f"{best['region'].title()}, with {best['revenue']} in revenue.",
                facts=[best["region"], str(best["revenue"])],
            ),
            Turn(
                f"How many sessions did the {traffic_line[1]} channel bring on {traffic_line[0]}?",
                [
                    [
                        Call(
                            "storage_read", {"operation": "download", "path": "exports/traffic.csv"}, csv_text
                        )
                    ],
                    Read(call=0, offset=295, limit=10),
                ],
                f"{traffic_line[2]} sessions and {traffic_line[3]} signups.",
                facts=[traffic_line[2], traffic_line[3]],
            ),
            Turn(
                f"Which product has the least stock, and what does {row_250[0]} cost?",
                [
                    [Call("database_query", {"query": "SELECT * FROM products"}, catalog)],
                    [
                        Call(
                            "database_query",
                            {"query": "SELECT sku, name, stock FROM products ORDER BY stock LIMIT 1"},
                            {
                                "columns": ["sku", "name", "stock"],
                                "rows": [[low[0], low[1], low[4]]],
                                "truncated": False,
                            },
                        )
                    ],
                    Read(call=0, offset=250, limit=1),
                ],
                f"{low[1]} ({low[0]}) has the least stock ({low[4]}); {row_250[0]} costs {row_250[3]}.",
                facts=[low[0], str(low[4]), str(row_250[3])],
            ),
        ],
    )


def _analysis() -> Scenario:
    north = orders(500, seed=21)
    south = orders(480, seed=22)
    csv_text = traffic_csv(120, seed=23)
    totals = region_totals(north + south)
    best = max(totals, key=lambda t: t["revenue"])
    returned = sum(1 for r in north + south if r["status"] == "returned")
    return Scenario(
        "long analysis with big tables",
        [
            Turn(
                "Analyse H2 sales: revenue by region, returns, and whether traffic explains it. Write it up.",
                [
                    [
                        Call(
                            "database_query",
                            {"query": "SELECT * FROM orders WHERE half = 2 AND shard = 1"},
                            north,
                        )
                    ],
                    [
                        Call(
                            "database_query",
                            {"query": "SELECT * FROM orders WHERE half = 2 AND shard = 2"},
                            south,
                        )
                    ],
                    Read(call=0, offset=0, limit=200),
                    Read(call=1, offset=0, limit=200),
                    [
                        Call(
                            "code_execute",
                            {"language": "python", "code": "totals_by_region(orders)"},
                            {"stdout": str(totals), "exit_code": 0},
                        )
                    ],
                    [
                        Call(
                            "storage_read",
                            {"operation": "download", "path": "exports/traffic_h2.csv"},
                            csv_text,
                        )
                    ],
                    [
                        Call(
                            "code_execute",
                            {"language": "python", "code": "returns(orders)"},
                            {"stdout": f"returned={returned}", "exit_code": 0},
                        )
                    ],
                    [
                        Call(
                            "storage_write",
                            {"path": "reports/h2.md", "content": "# H2 sales\n..."},
                            {"path": "reports/h2.md", "size": 2048},
                        )
                    ],
                ],
                f"Written to reports/h2.md: {best['region']} leads with {best['revenue']}; "
                f"{returned} orders returned.",
                facts=[best["region"], str(best["revenue"]), f"returned={returned}"],
            ),
        ],
    )


def _json_api() -> Scenario:
    """An HTTP tool (query_metric) whose JSON API answers 500 rows, one per product: before issue 27 the
    tool cut the answer at 10,000 characters, mid-record, before anything could describe it; now it is
    described, and the model pages to the row it needs."""
    rng = random.Random(31)
    rows = [
        {
            "product": f"sku-{i:05d}",
            "name": f"{rng.choice(PRODUCTS)} {rng.choice(('mini', 'pro', 'max', 'lite'))}",
            "channel": rng.choice(("web", "store", "partner")),
            "units": rng.randint(0, 4_000),
            "revenue": round(rng.uniform(0, 250_000), 2),
        }
        for i in range(500)
    ]
    wanted = rows[493]
    query = {"metric": "units", "period": "this_year", "group_by": "product"}
    return Scenario(
        "a JSON API answering 500 rows",
        [
            Turn(
                f"How many units of {wanted['product']} did we sell this year, and for how much?",
                [
                    [Call("query_metric", query, rows)],
                    Read(call=0, offset=480, limit=20),
                ],
                f"{wanted['product']} ({wanted['name']}) sold {wanted['units']} units this year, "
                f"for {wanted['revenue']}.",
                facts=[str(wanted["units"]), str(wanted["revenue"])],
            ),
        ],
    )


def all_scenarios() -> list[Scenario]:
    return [_lookup(), _dashboard_question(), _chat(), _three_questions(), _analysis(), _json_api()]

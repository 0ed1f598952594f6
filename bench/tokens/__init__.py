"""Input tokens, cacheable prefix and dollars per call: naive vs Stepwise, on five scripted BI
conversations (bench/tokens/scenarios.py), counted offline with litellm's token counter.

Per call: input tokens for each mode; the share of the request that repeats the previous request's
prefix under OpenAI's rules (a cached prefix is at least 1,024 tokens and grows in 128-token blocks);
and what the call costs at list prices from litellm's cost map, for one OpenAI and one Anthropic model,
without caching and with it (OpenAI caches by itself; Anthropic only at the cache marks Stepwise sets:
system prompt, tools and the last message, cf. stepwise.llm.client.CACHE_POINTS; naive sets none). A
cut whose replay fails a quality check is not counted.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import Section
from bench.tokens.costs import ANTHROPIC_MODEL, OPENAI_MODEL, CallFigures, measure
from bench.tokens.replay import replay
from bench.tokens.scenarios import all_scenarios

# Its own file as well as the suite's latest.json: a run of this benchmark alone keeps its per-call table.
RESULT = Path(__file__).resolve().parents[1] / "results" / "tokens.json"
GOAL_SCENARIO = "three-question conversation"
GOAL_CUT = 45.0  # percent fewer input tokens than naive
GOAL_PREFIX = 99.0  # percent of the previous request, on calls 2..n of a run


def run() -> Section:
    section = Section(
        f"Input tokens and cost per call, naive vs Stepwise ({OPENAI_MODEL}, {ANTHROPIC_MODEL})"
    )
    scenarios: dict[str, Any] = {}
    for scenario in all_scenarios():
        naive, ours = replay(scenario, "naive"), replay(scenario, "stepwise")
        naive_calls, our_calls = measure(naive.requests, naive=True), measure(ours.requests, naive=False)
        summary = _summary(naive_calls, our_calls, naive.failures, ours.failures)
        scenarios[scenario.name] = {
            **summary,
            "naive_failures": naive.failures,
            "stepwise_failures": ours.failures,
            "calls": {
                "naive": [c.as_dict() for c in naive_calls],
                "stepwise": [c.as_dict() for c in our_calls],
            },
        }
        _figures(section, scenario.name, summary)
    section.details["scenarios"] = scenarios
    section.details["models"] = {"openai": OPENAI_MODEL, "anthropic": ANTHROPIC_MODEL}
    goal = scenarios[GOAL_SCENARIO]
    met = goal["counted"] and goal["cut_percent"] >= GOAL_CUT
    worst = min(s["stepwise_prefix_min"] for s in scenarios.values() if s["stepwise_prefix_min"] is not None)
    worst_reused = min(
        s["stepwise_previous_reused_min"]
        for s in scenarios.values()
        if s["stepwise_previous_reused_min"] is not None
    )
    worst_kept = min(
        s["stepwise_previous_prefix_min"]
        for s in scenarios.values()
        if s["stepwise_previous_prefix_min"] is not None
    )
    section.notes += [
        f"goal: {GOAL_SCENARIO} ≥ {GOAL_CUT:.0f}% fewer input tokens with every check passing → "
        f"{goal['cut_percent']}% ({'met' if met else 'missed'})",
        f"goal: reusable prefix ≥ {GOAL_PREFIX:.0f}% on calls 2..n of a run, read as the share of the "
        f"previous request that the call repeats byte for byte → worst {worst_kept}% "
        f"({'met' if worst_kept >= GOAL_PREFIX else 'missed'}); what OpenAI's 128-token blocks serve of "
        f"it: worst {worst_reused}%; as a share of the call's own request: worst {worst}%",
        "a call's own request can never be ≥ 99% cached when the previous step's results are more than 1% "
        "of it (a table's description, a page of rows): that share is new input on any provider",
        "result_read is declared from the first call of every agent with tools (71 tokens a call), so the "
        "declarations never change within a run; before, it joined at the first described table and that "
        "call reused 0% of the previous request",
        "a JSON API answering 500 rows: before issue 27 the HTTP tool cut the answer at 10,000 characters "
        "(row 493 is past the cut, so the question could not be answered at all); now the loop describes it "
        "and the model pages to the row",
        "prefix shares are an upper bound (what a provider serves from cache depends on its routing);"
        " the Anthropic figures assume its 1,024-token minimum and a cache still warm (5 minutes)",
        "compaction (stepwise.loop.compaction.fit) starts at 75% of the model's window: none of these "
        "conversations reach it, so the cuts come from described tables; a compaction aims at 50% and "
        "the run's later calls apply it again unchanged (tests/unit/test_compaction.py), so only the "
        "call that compacts breaks the prefix",
    ]
    RESULT.write_text(
        json.dumps(
            {
                "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "notes": section.notes,
                **section.details,
            },
            indent=1,
        )
        + "\n"
    )
    return section


def _summary(
    naive: list[CallFigures], ours: list[CallFigures], naive_failed: list[str], ours_failed: list[str]
) -> dict[str, Any]:
    def total(calls: list[CallFigures], attr: str) -> float:
        return sum(getattr(c, attr) for c in calls)

    naive_tokens, our_tokens = int(total(naive, "input_tokens")), int(total(ours, "input_tokens"))
    later = [c.prefix_percent for c in ours if c.step > 1]
    later_naive = [c.prefix_percent for c in naive if c.step > 1]
    reused = [c.previous_reused_percent or 0.0 for c in ours if c.step > 1]
    kept = [c.previous_prefix_percent or 0.0 for c in ours if c.step > 1]
    return {
        "calls_naive": len(naive),
        "calls_stepwise": len(ours),
        "naive_input_tokens": naive_tokens,
        "stepwise_input_tokens": our_tokens,
        "cut_percent": round(100 * (naive_tokens - our_tokens) / naive_tokens, 1),
        "counted": not ours_failed,  # a cut that fails a quality check is not counted
        "quality": "pass" if not ours_failed and not naive_failed else f"{len(ours_failed)} failed",
        "first_call_tokens": ours[0].input_tokens,
        "stepwise_prefix_min": round(min(later), 1) if later else None,
        "stepwise_prefix_mean": round(sum(later) / len(later), 1) if later else None,
        "naive_prefix_mean": round(sum(later_naive) / len(later_naive), 1) if later_naive else None,
        "stepwise_previous_reused_min": round(min(reused), 1) if reused else None,
        "stepwise_previous_reused_mean": round(sum(reused) / len(reused), 1) if reused else None,
        "stepwise_previous_prefix_min": round(min(kept), 1) if kept else None,
        "stepwise_prefix_all_mean": round(sum(c.prefix_percent for c in ours[1:]) / max(1, len(ours) - 1), 1),
        "usd": {
            "openai_naive_uncached": round(total(naive, "openai_uncached"), 5),
            "openai_naive_cached": round(total(naive, "openai_cached"), 5),
            "openai_stepwise_uncached": round(total(ours, "openai_uncached"), 5),
            "openai_stepwise_cached": round(total(ours, "openai_cached"), 5),
            "anthropic_naive": round(total(naive, "anthropic_uncached"), 5),
            "anthropic_stepwise_uncached": round(total(ours, "anthropic_uncached"), 5),
            "anthropic_stepwise_cached": round(total(ours, "anthropic_cached"), 5),
        },
    }


def _figures(section: Section, name: str, s: dict[str, Any]) -> None:
    usd = s["usd"]
    cut_note = "" if s["counted"] else "NOT COUNTED: a quality check failed"
    section.add(f"{name}: input tokens naive", s["naive_input_tokens"], "tokens", f"{s['calls_naive']} calls")
    section.add(
        f"{name}: input tokens Stepwise", s["stepwise_input_tokens"], "tokens", f"{s['calls_stepwise']} calls"
    )
    section.add(f"{name}: cut", s["cut_percent"], "%", cut_note)
    section.add(f"{name}: quality checks", s["quality"])
    section.add(
        f"{name}: reusable prefix, calls 2..n of a run",
        s["stepwise_prefix_min"],
        "% (worst)",
        f"mean {s['stepwise_prefix_mean']}%, naive mean {s['naive_prefix_mean']}%",
    )
    section.add(
        f"{name}: previous request repeated, calls 2..n", s["stepwise_previous_prefix_min"], "% (worst)"
    )
    section.add(
        f"{name}: previous request served again, calls 2..n",
        s["stepwise_previous_reused_min"],
        "% (worst)",
        f"mean {s['stepwise_previous_reused_mean']}% (OpenAI's 128-token blocks)",
    )
    section.add(
        f"{name}: $ {OPENAI_MODEL} naive / Stepwise cached",
        f"{usd['openai_naive_uncached']:.4f} / {usd['openai_stepwise_cached']:.4f}",
        "USD",
        f"Stepwise uncached {usd['openai_stepwise_uncached']:.4f}, "
        f"naive auto-cached {usd['openai_naive_cached']:.4f}",
    )
    section.add(
        f"{name}: $ {ANTHROPIC_MODEL} naive / Stepwise cached",
        f"{usd['anthropic_naive']:.4f} / {usd['anthropic_stepwise_cached']:.4f}",
        "USD",
        f"Stepwise without marks {usd['anthropic_stepwise_uncached']:.4f}",
    )

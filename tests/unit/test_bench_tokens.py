"""The token bench measures what it claims: the quality checks fail a cut that hides a fact, described
tables reach the Stepwise replay and not the naive one, and the prefix follows OpenAI's block rules."""

import dataclasses

from bench.tokens.costs import OPENAI_BLOCK, OPENAI_MIN_PREFIX, measure
from bench.tokens.replay import replay
from bench.tokens.scenarios import Read, all_scenarios
from stepwise.tools import tables


def scenario(name: str):  # type: ignore[no-untyped-def]
    return next(s for s in all_scenarios() if s.name == name)


def test_stepwise_describes_the_tables_naive_pastes_and_both_pass_the_checks() -> None:
    three = scenario("three-question conversation")
    naive, ours = replay(three, "naive"), replay(three, "stepwise")

    assert naive.failures == [] and ours.failures == []
    last = ours.requests[-1]
    assert sum(tables.is_description(m.get("content")) for m in last.messages) == 3
    assert not any(tables.is_description(m.get("content")) for m in naive.requests[-1].messages)
    assert len(ours.requests) == len(naive.requests) + 2  # the two result_read pages


def test_a_fact_past_the_preview_fails_the_check_without_result_read() -> None:
    three = scenario("three-question conversation")
    second = three.turns[1]
    unread = dataclasses.replace(second, steps=[s for s in second.steps if not isinstance(s, Read)])
    broken = dataclasses.replace(three, turns=[three.turns[0], unread, three.turns[2]])

    failures = replay(broken, "stepwise").failures

    assert failures and all(f.startswith("run 2: fact") for f in failures)


def test_cached_prefixes_follow_openai_blocks_and_a_shuffled_toolset_breaks_them() -> None:
    chat = scenario("chat of five turns")
    ours = measure(replay(chat, "stepwise").requests, naive=False)
    naive = measure(replay(chat, "naive").requests, naive=True)

    assert all(c.openai_cached_tokens % OPENAI_BLOCK == 0 for c in ours)
    assert all(c.openai_cached_tokens == 0 or c.openai_cached_tokens >= OPENAI_MIN_PREFIX for c in ours)
    first_of_runs = [(o, n) for o, n in zip(ours, naive, strict=True) if o.step == 1 and o.run > 1]
    # A new run: Stepwise's sorted declarations keep the session's prefix; naive's reshuffled ones do not.
    assert all(o.openai_cached_tokens > 0 and n.openai_cached_tokens == 0 for o, n in first_of_runs)
    assert all(c.anthropic_read_tokens == 0 for c in naive)  # no cache marks, nothing cached

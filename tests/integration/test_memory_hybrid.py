"""Hybrid memory search through the local stack and real litellm: with STEPWISE_EMBEDDING_MODEL naming an
OpenAI-compatible embedding model (the fake on loopback), memory_save embeds what it saves, and
memory_search and auto_recall find a memory by meaning where BM25 finds nothing; without the variable,
the same search finds nothing and no embedding is asked for."""

from collections.abc import Iterator
from typing import Any

import pytest

from stepwise.memory import service
from stepwise_local.stack import LocalStack
from tests.fakes.openai_server import FakeOpenAI
from tests.integration.test_memory import DONE, agent, call, events, results, run, save

EMBEDDING_MODEL = "fake-embed"
ESPRESSO = "Hana prefers espresso after lunch"
BICYCLE = "Hana rides a bicycle to work"
# No word in common with either memory (BM25 scores both 0); "drink" means what "espresso" does in the
# fake's vector space.
QUESTION = "which hot drink suits me?"


@pytest.fixture
def embeddings(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    fake.same_meaning("espresso", "drink")
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    monkeypatch.setenv(service.EMBEDDING_MODEL_ENV, f"openai/{EMBEDDING_MODEL}")
    yield fake
    fake.close()


def embedded_inputs(fake: FakeOpenAI) -> list[list[str]]:
    assert {r.body["model"] for r in fake.embedded} <= {EMBEDDING_MODEL}
    return [list(r.body["input"]) for r in fake.embedded]


def recalled_ids(stack: LocalStack, run_id: str) -> list[str] | None:
    started = next(e for e in events(stack, run_id) if e["type"] == "run_started")
    ids: list[str] | None = started["data"].get("recalled_memory_ids")
    return ids


def searched(stack: LocalStack, agent_id: str, user_id: str) -> tuple[dict[str, Any], list[str]]:
    """A run whose message is QUESTION and whose model searches for QUESTION: the run and the contents
    memory_search found."""
    done = run(stack, agent_id, QUESTION, [call("memory_search", query=QUESTION), DONE], user_id=user_id)
    assert done["status"] == "succeeded", done
    (found,) = results(stack, done["run_id"])
    return done, [m["content"] for m in found["output"]["memories"]]


def test_a_memory_is_found_by_meaning_only_with_an_embedding_model(
    stack: LocalStack, embeddings: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent_id = agent(stack)
    saved = run(stack, agent_id, "remember", [save(ESPRESSO), save(BICYCLE), DONE], user_id="hana")
    assert saved["status"] == "succeeded", saved
    espresso_id = results(stack, saved["run_id"])[0]["output"]["memory_id"]
    # Each save embedded its content (the run's own recall found nothing stored yet, so asked nothing).
    assert embedded_inputs(embeddings) == [[ESPRESSO], [BICYCLE]]

    done, found = searched(stack, agent_id, "hana")

    # The memory about the drink, and not the one about the bicycle, by auto_recall and by memory_search.
    assert recalled_ids(stack, done["run_id"]) == [espresso_id]
    assert found == [ESPRESSO]
    assert embedded_inputs(embeddings)[2:] == [[QUESTION], [QUESTION]]

    # BM25 alone: the same question finds nothing, and no embedding is asked for.
    monkeypatch.delenv(service.EMBEDDING_MODEL_ENV)
    done, found = searched(stack, agent_id, "hana")

    assert found == [] and recalled_ids(stack, done["run_id"]) is None
    assert len(embeddings.embedded) == 4

"""Spend controls without a stack: the CLI's kill switch commands against an in-memory API, the
settings keys of provider keys, the circuit thresholds and the bulk cancel's filter."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import pytest

from stepwise.core import config
from stepwise.runs.bulk_cancel import CancelFilter
from stepwise.runs.models import Run
from stepwise.settings.models import is_provider_key, is_valid_key, parse_stored, provider_key, stored_key
from tests.unit.test_cli import FakeApi, cli


def test_runs_cancel_with_filters_sends_one_bulk_cancel() -> None:
    api = FakeApi(routes={"POST /v1/runs:cancel": (200, {"cancelled": 3, "continuing": True})})

    done = cli(api, "runs", "cancel", "--agent", "agt_1", "--status", "waiting")

    assert done.code == 0, done.err
    assert json.loads(api.requests[0].content) == {"agent_id": "agt_1", "status": "waiting"}
    assert "cancelled 3 runs; the rest are being cancelled in the background" in done.out


def test_runs_cancel_needs_a_run_or_a_filter_and_not_both() -> None:
    api = FakeApi()

    neither = cli(api, "runs", "cancel")
    both = cli(api, "runs", "cancel", "run_1", "--agent", "agt_1")

    assert neither.code == 2 and both.code == 2
    assert api.requests == []  # refused before any request


def test_agents_pause_and_unpause_patch_paused() -> None:
    agent = {"agent_id": "agt_1", "name": "a", "created_at": "2026-01-01T00:00:00Z"}
    sent: list[bool] = []

    def patch(request: httpx.Request) -> tuple[int, object]:
        paused = bool(json.loads(request.content)["paused"])
        sent.append(paused)
        return 200, {**agent, "updated_at": "2026-01-01T00:00:00Z", "paused": paused}

    api = FakeApi(routes={"PATCH /v1/agents/agt_1": patch})

    paused = cli(api, "agents", "pause", "agt_1")
    unpaused = cli(api, "agents", "unpause", "agt_1")

    assert sent == [True, False]
    assert "paused: new runs are refused" in paused.out
    assert "running: new runs are accepted" in unpaused.out


def test_provider_keys_are_settings_and_an_agents_own_is_stored_apart() -> None:
    assert is_valid_key("providers.openai.api_key") and is_provider_key(provider_key("anthropic"))
    assert not is_valid_key("providers.OpenAI.api_key") and not is_provider_key("EXA_API_KEY")
    stored = stored_key("providers.openai.api_key", "agt_1")
    assert stored != "providers.openai.api_key"
    assert parse_stored(stored) == ("providers.openai.api_key", "agt_1")
    assert parse_stored("EXA_API_KEY") == ("EXA_API_KEY", None)


def test_circuit_thresholds_per_provider_and_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STEPWISE_CIRCUIT_THRESHOLDS", "openai=10, anthropic=0")

    circuits = config.circuits()

    assert (circuits.threshold_for("openai"), circuits.threshold_for("anthropic")) == (10, 0)
    assert circuits.threshold_for("gemini") == 5  # the default


def test_a_bulk_cancel_filter_matches_its_user_and_time_only() -> None:
    cutoff = datetime(2026, 1, 2, tzinfo=UTC)
    run = Run.model_validate(
        {
            "run_id": "run_1",
            "agent_id": "agt_1",
            "session_id": "ses_1",
            "user_id": "alice",
            "status": "waiting",
            "input": "hi",
            "max_steps": 3,
            "created_at": datetime(2026, 1, 1, tzinfo=UTC),
        }
    )

    assert CancelFilter(user_id="alice").matches(run, cutoff)
    assert not CancelFilter(user_id="bob").matches(run, cutoff)
    assert not CancelFilter().matches(run, datetime(2025, 12, 31, tzinfo=UTC))
    assert CancelFilter().statuses() == ["queued", "running", "waiting"]

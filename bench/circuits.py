"""Spend controls on the model step: what the provider circuits and the tenant's own keys add to a
healthy model step, and what a run parked on an open circuit costs while it waits.

The real model path runs (an agent on "openai/gpt-fake", litellm over loopback HTTP to
tests/fakes/openai_server.py, the deployment's key). Metering is bench/meter.py's.

- Healthy step: a one-step run (the model answers text), its Step function's DynamoDB requests. The
  additions of this change are the circuit's read (QuotasTable GetItem, at most once per
  circuits.CACHE_SECONDS per function) and the provider-key settings (SettingsTable GetItem, through the
  settings cache, at most once per accessor.TTL_SECONDS): counted apart, warm and cold. Nothing else on
  a healthy step changed, so main's cost is the total less those.
- Parked run: the deployment's OpenAI circuit is opened (its item written as failing calls would), a run
  started; what it costs to park, then DynamoDB requests, Lambda invocations and state transitions over
  PARKED_SECONDS of waiting, then what the sweep's probe and resume cost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from bench.harness import Local, Section, local
from bench.meter import Recorder
from bench.transitions import transitions

MODEL = "openai/gpt-fake"
STEP_FUNCTION = "StepFunction"
PARKED_SECONDS = 2.0
SPEND_TABLES = ("QuotasTable", "SettingsTable")
POLLING = "bench polling (not counted)"


@contextmanager
def _environment(url: str) -> Iterator[None]:
    wanted = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-fake"}
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _step_requests(recorder: Recorder, mark: int) -> tuple[int, int]:
    """(all of the Step function's requests since `mark`, those on the spend controls' tables)."""
    mine = [r for r in recorder.since(mark) if r.function == STEP_FUNCTION]
    # Reads only: the Step's one QuotasTable write on a healthy run is the active-run slot an ending
    # gives back, as on main.
    spend = [r for r in mine if r.operation == "GetItem" and any(t in SPEND_TABLES for t in r.tables)]
    return len(mine), len(spend)


def _healthy(env: Local, recorder: Recorder, fake: Any, agent_id: str) -> dict[str, Any]:
    from stepwise.usage import circuits

    fake.text("warming up")
    env.run(None, 1, agent_id=agent_id)  # litellm's OpenAI provider loads on the first call
    circuits.forget()
    from stepwise.settings import accessor

    accessor._shared().invalidate("local")  # the tenant's settings read afresh: the cold case
    fake.text("cold caches")
    mark = len(recorder.requests)
    env.run(None, 1, agent_id=agent_id)
    cold = _step_requests(recorder, mark)
    warm_runs = []
    for i in range(3):
        fake.text(f"warm {i}")
        mark = len(recorder.requests)
        env.run(None, 1, agent_id=agent_id)
        warm_runs.append(_step_requests(recorder, mark))
    return {"cold": cold, "warm": warm_runs}


def _open_deployment_circuit() -> None:
    from stepwise.core.schema import utcnow
    from stepwise.core.tables import CircuitItem, bind
    from stepwise.usage import circuits

    bind()
    circuit = circuits.circuit_for("local", "", "openai", "deployment")
    now = utcnow()
    CircuitItem(
        circuit.pk,
        circuit.sk,
        failures=5,
        first_failure_at=now,
        opened_at=now - timedelta(minutes=5),
        model=MODEL,
    ).save()
    circuits.forget()


def _parked(env: Local, recorder: Recorder, fake: Any, agent_id: str) -> dict[str, Any]:
    from stepwise.usage import circuits

    _open_deployment_circuit()
    asked = len(fake.requests)
    mark, invoked = len(recorder.requests), len(recorder.invocations)
    run_id = env.start(None, 1, agent_id=agent_id)
    with recorder.charging(POLLING):
        env.wait_status(run_id, "waiting")
    time.sleep(0.3)  # Await's last writes land after the status
    park_requests = len(recorder.since(mark, exclude=(POLLING,)))
    park_invocations = len(recorder.invocations_since(invoked, exclude=(POLLING,)))
    park_transitions = transitions(env.history(run_id))

    mark, invoked = len(recorder.requests), len(recorder.invocations)
    time.sleep(PARKED_SECONDS)
    parked = {
        "requests": len(recorder.since(mark)),
        "invocations": len(recorder.invocations_since(invoked)),
        "transitions": transitions(env.history(run_id)) - park_transitions,
        "provider_calls": len(fake.requests) - asked,
    }

    fake.clear()
    mark, invoked = len(recorder.requests), len(recorder.invocations)
    with recorder.charging("sweep"):
        report = circuits.sweep(circuits.probe_through_step)
    with recorder.charging(POLLING):
        view = env.wait_run(run_id)
    env.wait_execution(run_id)
    resumed_by = [i.function for i in recorder.invocations_since(invoked, exclude=(POLLING,))]
    return {
        "park": {"requests": park_requests, "invocations": park_invocations, "transitions": park_transitions},
        "parked": parked,
        "resume": {
            "requests": len(recorder.since(mark, exclude=(POLLING,))),
            "invocations": len(recorder.invocations_since(invoked, exclude=(POLLING,))),
            "transitions": transitions(env.history(run_id)) - park_transitions,
            "functions": resumed_by,
            "report": report.model_dump(),
            "status": view["status"],
        },
    }


def run() -> Section:
    from tests.fakes.openai_server import FakeOpenAI

    section = Section("Spend controls: a healthy model step, and a run parked on a provider's circuit")
    env = local()
    fake = FakeOpenAI()
    recorder = Recorder(env)
    try:
        with _environment(fake.url), recorder.installed():
            agent_id = env.create_agent({"name": "bench-circuits", "model": MODEL})
            healthy = _healthy(env, recorder, fake, agent_id)
            parked = _parked(env, recorder, fake, agent_id)
    finally:
        fake.close()

    (cold_total, cold_spend), warm = healthy["cold"], healthy["warm"]
    warm_total = sorted(t for t, _ in warm)[len(warm) // 2]
    warm_spend = max(s for _, s in warm)
    section.add(
        "healthy model step: DynamoDB requests added (warm caches)",
        warm_spend,
        "requests",
        f"goal +0; the Step's requests in a one-step run: {warm_total} with this change, "
        f"{warm_total - warm_spend} without (main)",
        digits=0,
    )
    section.add(
        "  the same, first step after the caches expire",
        cold_spend,
        "requests",
        f"{cold_total} in all: the circuit's GetItem (once per 5 s per function) and the agent's and "
        "tenant's provider-key settings (once per 60 s per tenant and agent), GetItems",
        digits=0,
    )
    for phase, label in (("park", "parking"), ("parked", f"while parked ({PARKED_SECONDS:.0f} s)")):
        figures = parked[phase]
        section.add(
            f"parked run, {label}: Lambda invocations",
            figures["invocations"],
            "invocations",
            f"{figures['requests']} DynamoDB requests, {figures['transitions']} state transitions"
            + (f", {figures['provider_calls']} provider calls" if phase == "parked" else ""),
            digits=0,
        )
    resume = parked["resume"]
    section.add(
        "parked run, the sweep's probe and resume: Lambda invocations",
        resume["invocations"],
        "invocations",
        f"{resume['requests']} DynamoDB requests (the sweep's Scan included), {resume['transitions']} "
        f"transitions to the end of the run; it ended {resume['status']}",
        digits=0,
    )
    section.details = {"healthy": healthy, "parked": parked}
    return section

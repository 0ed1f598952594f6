"""Settings every test shares: quiet Powertools logs, no network fetch when litellm imports, and no
connection beyond loopback nor name lookup from the pytest process (tests/loopback_only.py), installed
here so it holds before any test module is imported."""

import os

import pytest
from hypothesis import HealthCheck, settings

from tests import loopback_only

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
loopback_only.install()

# The suite is an entry point like a handler module: DynamoDB's stores (moto's, in process) unless a
# test hands in fakes with `ports.using`.
from stepwise.store import wiring  # noqa: E402 - after the environment above

wiring.install()

# Property-based suites (tests/property) run the same examples on every run, a bounded number of them:
# a failure reproduces, and the suites' time is known (~40 s of CPU together). No example database is
# written (derandomize uses none). HYPOTHESIS_PROFILE=explore searches wider, at random, by hand.
settings.register_profile(
    "stepwise",
    derandomize=True,
    max_examples=60,
    deadline=None,  # a slow machine is not a failure; the example count bounds the time
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", max_examples=2_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "stepwise"))

# The modules that take longest (`pytest --durations=0`: each a minute or more, in few tests), first.
# `make test` keeps collection order (--no-loadscope-reorder; xdist's default puts the modules with the
# most tests first, and so these last), so no worker is left running one of them alone at the end.
SLOW_FIRST = (
    "tests/e2e/test_local_state.py",
    "tests/e2e/test_schemathesis.py",
    "tests/conformance/test_conformance.py",
    "tests/e2e/test_console_browser.py",
    "tests/integration/test_what_if.py",
)
# Last, though slow: the soak leaves webhook deliveries retrying against its closed receiver in its
# worker's queue, which a later module on that worker would find there (test_webhooks waits for the
# queue to drain).
LAST = ("tests/integration/test_soak.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {module: i for i, module in enumerate(SLOW_FIRST)} | {m: len(SLOW_FIRST) + 1 for m in LAST}
    # Stable: every other module keeps its place, between the two.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(SLOW_FIRST)))

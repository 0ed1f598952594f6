"""Settings every test shares: quiet Powertools logs, no network fetch when litellm imports, and no
connection beyond loopback nor name lookup from the pytest process (tests/loopback_only.py), installed
here so it holds before any test module is imported."""

import os

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

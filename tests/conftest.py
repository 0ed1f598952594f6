"""Settings every test shares: quiet Powertools logs, no network fetch when litellm imports, and no
connection beyond loopback nor name lookup from the pytest process (tests/loopback_only.py), installed
here so it holds before any test module is imported."""

import os

from tests import loopback_only

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
loopback_only.install()

# The suite is an entry point like a handler module: DynamoDB's stores (moto's, in process) unless a
# test hands in fakes with `ports.using`.
from stepwise.store import wiring  # noqa: E402 - after the environment above

wiring.install()

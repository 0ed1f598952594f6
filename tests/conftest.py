"""Settings every test shares: quiet Powertools logs, no network fetch when litellm imports."""

import os

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")

# The suite is an entry point like a handler module: DynamoDB's stores (moto's, in process) unless a
# test hands in fakes with `ports.using`.
from stepwise.store import wiring

wiring.install()

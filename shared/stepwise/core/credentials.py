"""Deployment secrets (the Slack signing secret, model providers' API keys), read through one port.

In AWS each secret is a Secrets Manager secret that the template creates (its value put there by the
operator, never passed through CloudFormation), named to the function by `<NAME>_ARN` and read through
Powertools Parameters, which caches it for MAX_AGE_SECONDS: a rotated value reaches every warm function
within that time, with no redeploy and no read per request. Locally and in tests the secret is the
environment variable `<NAME>` itself, read on every call (`STEPWISE_SECRETS=env`, the default; the
template sets `aws`).

A secret that was never put (the template's placeholder, or a secret with no value yet) is None: the
feature it enables is off, exactly as an unset variable is locally.
"""

from __future__ import annotations

from functools import cache
from typing import Protocol

from stepwise.core import config
from stepwise.core.config import ConfigError

SLACK_SIGNING_SECRET = config.SecretVariables.variable("slack_signing_secret")
OPENAI_API_KEY = config.SecretVariables.variable("openai_api_key")
ANTHROPIC_API_KEY = config.SecretVariables.variable("anthropic_api_key")
GOOGLE_CLIENT_SECRET = config.SecretVariables.variable("google_client_secret")  # gmail triggers' OAuth client
# The names a deployment may hold; the template creates one Secrets Manager secret for each.
NAMES = (SLACK_SIGNING_SECRET, OPENAI_API_KEY, ANTHROPIC_API_KEY, GOOGLE_CLIENT_SECRET)
ARN_SUFFIX = config.ARN_SUFFIX
# What the template's secrets hold until the operator puts a value: not a secret, just "not set".
PLACEHOLDER = "unset"
# Seconds a value read from Secrets Manager is reused before it is read again (a rotation's delay).
MAX_AGE_SECONDS = 300


class SecretSource(Protocol):
    def get(self, name: str) -> str | None:
        """The secret's value, or None when it is not set."""
        ...


class EnvironmentSecrets:
    """The local stack's and the tests' source: the variable itself, read when asked."""

    def get(self, name: str) -> str | None:
        return _value(config.secret_variables().get(name))


class SecretsManagerSecrets:
    """AWS: the Secrets Manager secret named by `<NAME>_ARN`, through Powertools Parameters."""

    def __init__(self, max_age: int = MAX_AGE_SECONDS) -> None:
        self.max_age = max_age

    def get(self, name: str) -> str | None:
        arn = config.secret_variables().get(name + ARN_SUFFIX)
        if not arn:
            return None  # this function was given no such secret: the feature is off here
        from aws_lambda_powertools.utilities import parameters
        from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError

        try:
            value = parameters.get_secret(arn, max_age=self.max_age)
        except GetParameterError as exc:
            # A secret created without a value has no AWSCURRENT version yet: not set, not broken.
            if "ResourceNotFoundException" in repr(exc.__cause__ or exc):
                return None
            raise
        return _value(value if isinstance(value, str) else None)


def _value(raw: str | None) -> str | None:
    text = (raw or "").strip()
    return None if not text or text == PLACEHOLDER else text


@cache
def source() -> SecretSource:
    """The port for this process, chosen once from STEPWISE_SECRETS."""
    return SecretsManagerSecrets() if config.secrets().source == "aws" else EnvironmentSecrets()


def get(name: str) -> str | None:
    if name not in NAMES:
        raise ConfigError(f"{name} is not a deployment secret (known: {', '.join(NAMES)})")
    return source().get(name)


def reset() -> None:
    """Forget the chosen source (the local stack and tests set STEPWISE_SECRETS late)."""
    config.secrets.cache_clear()
    source.cache_clear()

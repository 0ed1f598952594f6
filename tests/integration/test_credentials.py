"""Deployment secrets: Secrets Manager through Powertools Parameters in AWS (refreshed after
MAX_AGE_SECONDS), the environment locally; the placeholder the template creates means "not set"."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities import parameters
from aws_lambda_powertools.utilities.parameters import base
from moto import mock_aws

from stepwise.approvals import links
from stepwise.approvals.channels import slack
from stepwise.core import credentials
from stepwise.core.config import ConfigError
from stepwise.llm import client


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("STEPWISE_SECRETS", "aws")
    for name in credentials.NAMES:  # and whatever the local stack of another test left in the process
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name + credentials.ARN_SUFFIX, raising=False)
    credentials.reset()
    parameters.clear_caches()
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")
    monkeypatch.undo()
    credentials.reset()
    parameters.clear_caches()


def put(sm: Any, monkeypatch: pytest.MonkeyPatch, name: str, value: str | None) -> str:
    # Unique per test: moto's backend may outlive this test's mock (another test's stack shares it).
    unique = f"stepwise-{name}-{uuid.uuid4().hex[:8]}"
    args = {"Name": unique} | ({"SecretString": value} if value is not None else {})
    arn = str(sm.create_secret(**args)["ARN"])
    monkeypatch.setenv(name + credentials.ARN_SUFFIX, arn)
    return arn


def test_in_aws_the_value_comes_from_secrets_manager_not_the_environment(
    aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(aws, monkeypatch, "SLACK_SIGNING_SECRET", "from-secrets-manager")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "from-the-environment")

    assert slack.signing_secret() == "from-secrets-manager"


def test_a_rotated_value_is_read_again_after_max_age(aws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    arn = put(aws, monkeypatch, "OPENAI_API_KEY", "sk-old-key-000")
    assert credentials.get("OPENAI_API_KEY") == "sk-old-key-000"
    aws.put_secret_value(SecretId=arn, SecretString="sk-new-key-111")

    assert credentials.get("OPENAI_API_KEY") == "sk-old-key-000"  # cached: no read per request
    later = datetime.now() + timedelta(seconds=credentials.MAX_AGE_SECONDS + 1)
    monkeypatch.setattr(base, "datetime", _Clock(later))  # Powertools' cache clock, moved past max_age
    assert credentials.get("OPENAI_API_KEY") == "sk-new-key-111"


class _Clock:
    def __init__(self, now: datetime) -> None:
        self._now = now

    def now(self) -> datetime:
        return self._now


def test_the_templates_placeholder_and_a_secret_without_a_value_are_not_set(
    aws: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    put(aws, monkeypatch, "SLACK_SIGNING_SECRET", credentials.PLACEHOLDER)
    put(aws, monkeypatch, "ANTHROPIC_API_KEY", None)

    assert credentials.get("ANTHROPIC_API_KEY") is None
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        slack.signing_secret()  # Slack stays off (the API answers 404 slack_not_configured)


def test_a_function_given_no_arn_has_no_such_secret(aws: Any) -> None:
    assert credentials.get("OPENAI_API_KEY") is None


def test_the_providers_key_rides_with_the_request(aws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    put(aws, monkeypatch, "OPENAI_API_KEY", "sk-openai-from-sm")
    put(aws, monkeypatch, "ANTHROPIC_API_KEY", "sk-ant-from-sm")

    assert client._request("openai/gpt-4o", None, None, None, None)["api_key"] == "sk-openai-from-sm"
    assert client._request("gpt-4o", None, None, None, None)["api_key"] == "sk-openai-from-sm"
    anthropic = client._request("anthropic/claude-3-5-haiku-20241022", None, None, None, None)
    assert anthropic["api_key"] == "sk-ant-from-sm"
    # Bedrock signs with the function's role; the scripted model needs nothing.
    assert "api_key" not in client._request("bedrock/amazon.nova-lite-v1:0", None, None, None, None)
    assert "api_key" not in client._request("scripted", None, None, None, None)


def test_locally_the_environment_is_read_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STEPWISE_SECRETS", raising=False)
    credentials.reset()
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "one")
    assert slack.signing_secret() == "one"
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "two")
    assert slack.signing_secret() == "two"
    with pytest.raises(ConfigError, match="not a deployment secret"):
        credentials.get("DATABASE_URL")
    credentials.reset()


# --- The approval-link secret: the same Parameters cache, the local variable first ------------------


@pytest.fixture
def link_secret(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.delenv(links.SECRET_ENV, raising=False)
    links.reset()
    yield aws
    links.reset()


def put_link_secret(sm: Any, monkeypatch: pytest.MonkeyPatch, **value: Any) -> str:
    arn = str(sm.create_secret(Name=f"stepwise-link-{uuid.uuid4().hex[:8]}", **value)["ARN"])
    monkeypatch.setenv(links.SECRET_ARN_ENV, arn)
    return arn


def test_in_aws_the_link_secret_comes_from_secrets_manager(
    link_secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_link_secret(link_secret, monkeypatch, SecretString="k" * 40)

    assert links.secret() == b"k" * 40


def test_a_binary_link_secret_is_used_as_is(link_secret: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    put_link_secret(link_secret, monkeypatch, SecretBinary=b"\x00\x01" * 16)

    assert links.secret() == b"\x00\x01" * 16


OLD = "old secret " + "o" * 40
NEW = "new secret " + "n" * 40
NEWER = "newer secret " + "w" * 40


def past_max_age(monkeypatch: pytest.MonkeyPatch, steps: int = 1) -> None:
    later = datetime.now() + timedelta(seconds=steps * (links.MAX_AGE_SECONDS + 1))
    monkeypatch.setattr(base, "datetime", _Clock(later))  # Powertools' cache clock, moved past max_age


def test_a_link_signed_before_a_rotation_still_verifies_after_it(
    link_secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    arn = put_link_secret(link_secret, monkeypatch, SecretString=OLD)
    expires = datetime.now(UTC) + timedelta(hours=1)
    old_token = links.sign("int_1", "t1", expires, links.secret())
    link_secret.put_secret_value(SecretId=arn, SecretString=NEW)

    assert links.secret() == OLD.encode()  # cached: no read per request
    past_max_age(monkeypatch)
    assert links.secret() == NEW.encode()  # signing uses the new secret...
    new_token = links.sign("int_2", "t1", expires, links.secret())
    with pytest.raises(links.ForgedLink):
        links.verify(new_token, OLD.encode(), datetime.now(UTC))  # ...and nothing else
    # Both verify: the pending link through the previous version, the new one through the current.
    assert links.verify(old_token, links.verifying_secrets(), datetime.now(UTC)).interaction_id == "int_1"
    assert links.verify(new_token, links.verifying_secrets(), datetime.now(UTC)).interaction_id == "int_2"


def test_a_link_signed_two_rotations_ago_is_refused(
    link_secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    arn = put_link_secret(link_secret, monkeypatch, SecretString=OLD)
    expires = datetime.now(UTC) + timedelta(hours=1)
    oldest = links.sign("int_1", "t1", expires, links.secret())
    link_secret.put_secret_value(SecretId=arn, SecretString=NEW)
    link_secret.put_secret_value(SecretId=arn, SecretString=NEWER)
    past_max_age(monkeypatch)

    with pytest.raises(links.ForgedLink, match="this approval link is not valid"):
        links.verify(oldest, links.verifying_secrets(), datetime.now(UTC))
    between = links.sign("int_2", "t1", expires, NEW.encode())  # signed while NEW was current
    assert links.verify(between, links.verifying_secrets(), datetime.now(UTC)).interaction_id == "int_2"


def test_a_follow_url_signed_before_a_rotation_is_admitted_by_the_same_rule(
    link_secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stepwise.follow import tokens

    arn = put_link_secret(link_secret, monkeypatch, SecretString=OLD)
    now = datetime.now(UTC)
    claims = tokens.new_claims("t1", "run_1", 0, now)
    url_token = tokens.sign(claims, links.secret())
    link_secret.put_secret_value(SecretId=arn, SecretString=NEW)
    past_max_age(monkeypatch)

    assert tokens.verify(url_token, links.verifying_secrets(), now) == claims
    link_secret.put_secret_value(SecretId=arn, SecretString=NEWER)
    past_max_age(monkeypatch, steps=2)
    with pytest.raises(links.ForgedLink):
        tokens.verify(url_token, links.verifying_secrets(), now)


def test_a_never_rotated_secret_verifies_against_the_current_version_only(
    link_secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_link_secret(link_secret, monkeypatch, SecretString=OLD)
    expires = datetime.now(UTC) + timedelta(hours=1)

    assert list(links.verifying_secrets()) == [OLD.encode()]  # no AWSPREVIOUS: not an error
    with pytest.raises(links.ForgedLink):
        links.verify(
            links.sign("int_1", "t1", expires, NEW.encode()), links.verifying_secrets(), datetime.now(UTC)
        )


def test_both_versions_are_cached_for_max_age_including_an_absent_previous(
    link_secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    arn = put_link_secret(link_secret, monkeypatch, SecretString=OLD)
    expires = datetime.now(UTC) + timedelta(hours=1)
    forged = links.sign("int_1", "t1", expires, b"f" * 40)
    with pytest.raises(links.ForgedLink):
        links.verify(forged, links.verifying_secrets(), datetime.now(UTC))  # reads (and caches) both
    link_secret.put_secret_value(SecretId=arn, SecretString=NEW)
    signed_with_new = links.sign("int_2", "t1", expires, NEW.encode())

    # Within max_age neither version is read again: current is still OLD, previous still absent.
    assert list(links.verifying_secrets()) == [OLD.encode()]
    with pytest.raises(links.ForgedLink):
        links.verify(signed_with_new, links.verifying_secrets(), datetime.now(UTC))
    past_max_age(monkeypatch)
    assert list(links.verifying_secrets()) == [NEW.encode(), OLD.encode()]


def test_resetting_the_link_secret_leaves_the_other_secrets_cached(
    link_secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    link_arn = put_link_secret(link_secret, monkeypatch, SecretString=OLD)
    key_arn = put(link_secret, monkeypatch, "OPENAI_API_KEY", "sk-old-key-000")
    assert (links.secret(), credentials.get("OPENAI_API_KEY")) == (OLD.encode(), "sk-old-key-000")
    link_secret.put_secret_value(SecretId=link_arn, SecretString=NEW)
    link_secret.put_secret_value(SecretId=key_arn, SecretString="sk-new-key-111")

    links.reset()

    assert links.secret() == NEW.encode()  # read again
    assert credentials.get("OPENAI_API_KEY") == "sk-old-key-000"  # still the cached value


def test_the_local_variable_wins_over_secrets_manager(
    link_secret: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_link_secret(link_secret, monkeypatch, SecretString="s" * 40)
    monkeypatch.setenv(links.SECRET_ENV, "e" * 40)

    assert links.secret() == b"e" * 40
    assert list(links.verifying_secrets()) == [b"e" * 40]  # the variable has no previous version

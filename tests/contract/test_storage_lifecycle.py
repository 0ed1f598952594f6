"""The storage bucket's lifecycle rules are the retention the code relies on (the tags of
stepwise.tools.builtin._storage, on a run's files and its large results): the tags the code writes
select the rules, a run's files go with its events (EventsTtlDays), an upload no run took goes after
the days the code says, and an expiry in the versioned bucket leaves no old version behind. Read from
template.yaml and the code; no AWS."""

from __future__ import annotations

from typing import Any

import pytest

from stepwise.attachments.models import UPLOAD_EXPIRES_SECONDS
from stepwise.core import config, s3
from stepwise_local.stack import parameter_env
from tests.contract.test_template import resources, template

pytestmark = pytest.mark.contract

DAY = 24 * 60 * 60


def rules() -> list[dict[str, Any]]:
    (bucket,) = resources("AWS::S3::Bucket").values()
    return list(bucket["Properties"]["LifecycleConfiguration"]["Rules"])


def rule_for(retention: str) -> dict[str, Any]:
    """The one enabled rule selecting objects tagged `stepwise-retention=<retention>`."""
    wanted = {"Key": s3.RETENTION_TAG, "Value": retention}
    selecting = [r for r in rules() if wanted in r.get("TagFilters", [])]
    assert len(selecting) == 1, f"rules selecting {s3.tagging(retention)}: {selecting}"
    (rule,) = selecting
    assert rule["Status"] == "Enabled"
    return rule


@pytest.mark.parametrize("retention", [s3.RUN_RETENTION, s3.UPLOAD_RETENTION])
def test_each_retention_tag_selects_one_rule_on_that_tag_alone_under_every_tenant(retention: str) -> None:
    rule = rule_for(retention)

    # No prefix: objects live under tenants/<tenant>/..., which no single prefix reaches.
    assert "Prefix" not in rule
    assert rule["TagFilters"] == [{"Key": s3.RETENTION_TAG, "Value": retention}]
    # The bucket is versioned: an expiry (or an erasure) leaves a noncurrent version, removed a day on.
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}


def test_run_attachments_expire_with_the_runs_events() -> None:
    rule = rule_for(s3.RUN_RETENTION)

    assert rule["ExpirationInDays"] == {"Ref": "EventsTtlDays"}
    # The same parameter is the days the code keeps a run's events (config.events_ttl_days).
    alias = config.Runtime.model_fields["events_ttl_days"].alias
    assert parameter_env(template())["EventsTtlDays"] == alias


def test_an_untaken_upload_expires_after_the_days_the_code_keeps_it_and_outlives_its_url() -> None:
    rule = rule_for(s3.UPLOAD_RETENTION)

    assert rule["ExpirationInDays"] == s3.UPLOAD_RETENTION_DAYS
    # A file PUT at the last second of its presigned URL is still there for the run that takes it.
    assert rule["ExpirationInDays"] * DAY > UPLOAD_EXPIRES_SECONDS


def test_abandoned_multipart_uploads_are_aborted() -> None:
    aborting = [r for r in rules() if "AbortIncompleteMultipartUpload" in r]

    assert [r["AbortIncompleteMultipartUpload"] for r in aborting] == [{"DaysAfterInitiation": 1}]
    assert aborting[0]["Status"] == "Enabled"

"""Settings on the local stack: the API writes, lists and deletes them, never answering with a value;
DynamoDB holds only KMS ciphertext bound to tenant and name; each tenant has its own namespace; tools
read values through the one cached accessor."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from stepwise.core import config
from stepwise.settings.accessor import invalidate, tenant_settings
from stepwise.settings.crypto import SettingUnreadable, context, decrypt
from stepwise.settings.models import MAX_VALUE_CHARS
from stepwise_local.stack import DEFAULT_KEY, DEFAULT_TENANT, LocalStack
from tests.integration.support import OTHER_KEY

TENANT = DEFAULT_TENANT
OTHER = "other"  # OTHER_KEY's tenant (tests/integration/conftest.py)


@pytest.fixture
def key(stack: LocalStack) -> Iterator[str]:
    """A setting name no other test uses; whatever the test stored under it is deleted afterwards."""
    name = f"TEST_{uuid.uuid4().hex[:12].upper()}"
    yield name
    for api_key in (DEFAULT_KEY, OTHER_KEY):
        stack.invoke_api("DELETE", f"/v1/settings/{name}", key=api_key)


def secret() -> str:
    return f"sk-secret-{uuid.uuid4().hex}"


def put(stack: LocalStack, key: str, value: str, api_key: str = DEFAULT_KEY) -> dict[str, Any]:
    status, _, body = stack.invoke_api("PUT", f"/v1/settings/{key}", {"value": value}, key=api_key)
    assert status == 200, body
    return dict(body)


def listed(stack: LocalStack, api_key: str = DEFAULT_KEY) -> dict[str, Any]:
    status, _, body = stack.invoke_api("GET", "/v1/settings", key=api_key)
    assert status == 200, body
    return dict(body)


def stored(tenant_id: str, key: str) -> dict[str, Any] | None:
    """The raw DynamoDB item, read past the store layer."""
    item = boto3.client("dynamodb").get_item(
        TableName=config.tables().settings,
        Key={"tenant_id": {"S": tenant_id}, "key": {"S": key}},
        ConsistentRead=True,
    )
    return item.get("Item")


def test_put_list_delete_and_no_response_carries_the_value(stack: LocalStack, key: str) -> None:
    # Given a value put through the API
    value = secret()
    created = put(stack, key, value)

    # Then the answer names the setting, when it changed and whose it is (the tenant's), and nothing else
    assert set(created) == {"key", "updated_at", "agent_id"} and created["key"] == key
    assert created["agent_id"] is None
    assert value not in json.dumps(created)

    # And the list has its name and time, never its value
    body = listed(stack)
    assert {"key": key, "updated_at": created["updated_at"], "agent_id": None} in body["settings"]
    assert all(set(s) == {"key", "updated_at", "agent_id"} for s in body["settings"])
    assert value not in json.dumps(body)

    # When it is replaced, the list shows the new time and still no value
    replacement = secret()
    updated = put(stack, key, replacement)
    assert updated["updated_at"] >= created["updated_at"]
    body = listed(stack)
    assert [s for s in body["settings"] if s["key"] == key] == [updated]
    assert value not in json.dumps(body) and replacement not in json.dumps(body)

    # When it is deleted, it is gone, and deleting it again is a 404
    status, _, _ = stack.invoke_api("DELETE", f"/v1/settings/{key}")
    assert status == 204
    assert key not in [s["key"] for s in listed(stack)["settings"]]
    status, _, error = stack.invoke_api("DELETE", f"/v1/settings/{key}")
    assert status == 404 and error["error"]["code"] == "setting_not_found"


@pytest.mark.parametrize("bad", ["exa_api_key", "1KEY", "_KEY", "KEY-NAME", "A" * 65])
def test_a_key_name_outside_the_pattern_is_a_404_and_stores_nothing(stack: LocalStack, bad: str) -> None:
    """As the spec says and as every other path parameter does: a key no setting can have names none."""
    status, _, error = stack.invoke_api("PUT", f"/v1/settings/{bad}", {"value": "v"})
    assert status == 404 and error["error"]["code"] == "setting_not_found", error

    status, _, error = stack.invoke_api("DELETE", f"/v1/settings/{bad}")
    assert status == 404 and error["error"]["code"] == "setting_not_found", error
    assert bad not in [s["key"] for s in listed(stack)["settings"]]


@pytest.mark.parametrize(
    "body", [{"value": ""}, {"value": "x" * (MAX_VALUE_CHARS + 1)}, {}, {"value": 7}, {"value": "v", "x": 1}]
)
def test_a_bad_value_is_a_422_and_stores_nothing(stack: LocalStack, key: str, body: dict[str, Any]) -> None:
    status, _, error = stack.invoke_api("PUT", f"/v1/settings/{key}", body)

    assert status == 422 and error["error"]["code"] == "validation_error", error
    assert stored(TENANT, key) is None


def test_settings_need_an_api_key(stack: LocalStack, key: str) -> None:
    for method, path, body in (
        ("PUT", f"/v1/settings/{key}", {"value": "v"}),
        ("GET", "/v1/settings", None),
        ("DELETE", f"/v1/settings/{key}", None),
    ):
        status, _, _ = stack.invoke_api(method, path, body, key=None)
        assert status == 401, (method, path)
    assert stored(TENANT, key) is None


def test_dynamodb_holds_ciphertext_bound_to_tenant_and_name(stack: LocalStack, key: str) -> None:
    # Given a value put through the API
    value = secret()
    put(stack, key, value)

    # Then the item holds KMS ciphertext, not the value, nowhere in any attribute
    item = stored(TENANT, key)
    assert item is not None
    parts = [part["B"] for part in item["ciphertext"]["L"]]
    assert len(parts) == 1
    assert value.encode() not in json.dumps(item, default=repr).encode()
    assert all(value.encode() not in part for part in parts)

    # And it decrypts under its own context, with the stack's key
    kms = boto3.client("kms")
    key_id = stack.resolver.physical["SettingsKey"]
    plain = kms.decrypt(CiphertextBlob=parts[0], KeyId=key_id, EncryptionContext=context(TENANT, key))
    assert plain["Plaintext"].decode() == value

    # But not under another tenant's context, nor under another name's
    for wrong in (context(OTHER, key), context(TENANT, f"{key}_X"), {}):
        with pytest.raises(kms.exceptions.InvalidCiphertextException):
            kms.decrypt(CiphertextBlob=parts[0], KeyId=key_id, EncryptionContext=wrong)
    with pytest.raises(SettingUnreadable):
        decrypt(OTHER, key, parts)
    assert decrypt(TENANT, key, parts) == value


def test_tenants_have_separate_namespaces(stack: LocalStack, key: str) -> None:
    # Given the same name set by two tenants to different values
    mine, theirs = secret(), secret()
    put(stack, key, mine)

    # Then before the other tenant sets it, it sees none of it: not listed, not deletable
    assert key not in [s["key"] for s in listed(stack, OTHER_KEY)["settings"]]
    status, _, _ = stack.invoke_api("DELETE", f"/v1/settings/{key}", key=OTHER_KEY)
    assert status == 404
    assert tenant_settings(OTHER).get(key) is None

    put(stack, key, theirs, OTHER_KEY)

    # And each tenant's tools read that tenant's value
    assert tenant_settings(TENANT).get(key) == mine
    assert tenant_settings(OTHER).get(key) == theirs
    assert mine not in json.dumps(listed(stack, OTHER_KEY))

    # When one tenant deletes it, the other's stays
    status, _, _ = stack.invoke_api("DELETE", f"/v1/settings/{key}", key=OTHER_KEY)
    assert status == 204
    assert tenant_settings(OTHER).get(key) is None
    assert tenant_settings(TENANT).get(key) == mine
    assert key in [s["key"] for s in listed(stack)["settings"]]


def test_a_ciphertext_replayed_under_another_tenant_does_not_decrypt(stack: LocalStack, key: str) -> None:
    # Given someone with write access to the table copies a tenant's item into another tenant's partition
    put(stack, key, secret())
    item = stored(TENANT, key)
    assert item is not None
    ddb = boto3.client("dynamodb")
    ddb.put_item(TableName=config.tables().settings, Item={**item, "tenant_id": {"S": OTHER}})
    invalidate(OTHER)

    # Then the other tenant's tools do not get the value: the accessor refuses it
    with pytest.raises(SettingUnreadable, match=key):
        tenant_settings(OTHER).get(key)


def test_tools_read_what_the_api_put_through_the_accessor(stack: LocalStack, key: str) -> None:
    # Given a value put through the API
    first = secret()
    put(stack, key, first)

    # Then the accessor reads it decrypted
    assert tenant_settings(TENANT).get(key) == first

    # And a write through the API in this process is visible at once (the API invalidates its cache)
    second = secret()
    put(stack, key, second)
    assert tenant_settings(TENANT).get(key) == second
    stack.invoke_api("DELETE", f"/v1/settings/{key}")
    assert tenant_settings(TENANT).get(key) is None


def test_a_long_value_round_trips_in_bound_parts(stack: LocalStack, key: str) -> None:
    # Given the longest value, in characters that take two bytes each (32 KB: eight KMS parts)
    value = "é" * (MAX_VALUE_CHARS - 1) + "!"
    put(stack, key, value)

    # Then it is stored in several parts and reads back whole
    item = stored(TENANT, key)
    assert item is not None
    parts = [part["B"] for part in item["ciphertext"]["L"]]
    assert len(parts) == 8
    assert tenant_settings(TENANT).get(key) == value

    # But parts in another order do not decrypt
    with pytest.raises(SettingUnreadable):
        decrypt(TENANT, key, [parts[1], parts[0], *parts[2:]])
    with pytest.raises(SettingUnreadable):
        decrypt(TENANT, key, parts[:-1])

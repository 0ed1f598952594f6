"""Values at rest: KMS ciphertext bound to its tenant and its name.

Every part is encrypted under the encryption context {"tenant_id": ..., "key": ...}; KMS authenticates
the context with the ciphertext, so decrypting needs the same context, and a ciphertext copied into
another tenant's item or under another name fails to decrypt. KMS encrypts at most 4 KB per call, so
a longer value (up to 64 KB of UTF-8) is split into parts whose context also says which part of how
many ("part": "2/3"), which keeps parts from being reordered, dropped or mixed between values.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from stepwise.core import aws, config

KMS_MAX_PLAINTEXT = 4096  # bytes per kms:Encrypt call
# KMS's answers to a ciphertext that is not ours, not for this context, or altered.
_UNREADABLE = frozenset({"InvalidCiphertextException", "IncorrectKeyException"})


class SettingUnreadable(Exception):
    """A stored setting does not decrypt under its own tenant and name: it was copied from elsewhere or
    altered. The message names the tenant and key, never a value."""


def context(tenant_id: str, key: str, index: int = 0, count: int = 1) -> dict[str, str]:
    """The encryption context of part `index` of `count` (a one-part value's is just tenant and key)."""
    bound = {"tenant_id": tenant_id, "key": key}
    if count > 1:
        bound["part"] = f"{index + 1}/{count}"
    return bound


def encrypt(tenant_id: str, key: str, value: str) -> tuple[list[bytes], str]:
    """The ciphertext parts of `value`, in order, and the ARN of the KMS key that made them."""
    if not value:
        raise ValueError("a setting's value is at least one character")
    data = value.encode()
    chunks = [data[i : i + KMS_MAX_PLAINTEXT] for i in range(0, len(data), KMS_MAX_PLAINTEXT)]
    kms, key_id = aws.client("kms"), config.settings_key().key_id
    parts, key_arn = [], key_id
    for index, chunk in enumerate(chunks):
        out = kms.encrypt(
            KeyId=key_id, Plaintext=chunk, EncryptionContext=context(tenant_id, key, index, len(chunks))
        )
        parts.append(bytes(out["CiphertextBlob"]))
        key_arn = str(out["KeyId"])
    return parts, key_arn


def decrypt(tenant_id: str, key: str, parts: list[bytes]) -> str:
    """The value, if `parts` were encrypted for exactly this tenant and key; else SettingUnreadable.
    Other KMS errors (throttling, an unavailable key) propagate: they say nothing about the data."""
    if not parts:
        raise SettingUnreadable(f"setting {key} of tenant {tenant_id} has no ciphertext")
    kms, key_id = aws.client("kms"), config.settings_key().key_id
    plain = b""
    try:
        for index, blob in enumerate(parts):
            out = kms.decrypt(
                CiphertextBlob=blob,
                KeyId=key_id,
                EncryptionContext=context(tenant_id, key, index, len(parts)),
            )
            plain += out["Plaintext"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in _UNREADABLE:
            raise SettingUnreadable(f"setting {key} of tenant {tenant_id} does not decrypt") from exc
        raise
    return plain.decode()

"""Per-tenant settings: secrets such as EXA_API_KEY that builtin tools read.

API. `PUT /v1/settings/{key}` `{value}` stores a value and answers `{key, updated_at}`;
`DELETE /v1/settings/{key}` removes it (404 when there is none); `GET /v1/settings` lists
`{settings: [{key, updated_at}]}`. No response ever carries a value: the API can encrypt
(KMSEncryptPolicy) but not decrypt.

At rest (`crypto`). A value is encrypted with the stack's KMS key (SETTINGS_KEY_ID) under the encryption
context `{"tenant_id": ..., "key": ...}`, and only the ciphertext is stored (SettingsTable, HASH
tenant_id, RANGE key). KMS binds the context into the ciphertext, so a ciphertext copied into another
tenant's item, or under another name, does not decrypt.

Reading (`accessor`). Tools read settings only through `tenant_settings(tenant_id).get(key)`. Decrypted
values are cached in memory, per tenant and key, for `TTL_SECONDS` within a warm Lambda: a tool call
then costs no DynamoDB read and no KMS call when the same tenant's settings were read moments ago.
The trade-off: a PUT or DELETE reaches tools running in other warm Lambdas (StepFunction) only
when their entry expires, so for up to `TTL_SECONDS` a tool may still use the previous value (or a
deleted one). Writes invalidate the cache of the process that made them (`invalidate`).
"""

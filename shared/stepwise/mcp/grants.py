"""MCP servers' OAuth grants and authorizations in flight (stepwise.mcp.authorization.GrantStore) in
McpAuthTable, encrypted like settings: the item holds only KMS ciphertext, bound by its encryption context
to its tenant and its id, so a ciphertext copied to another item or tenant does not decrypt."""

from __future__ import annotations

from datetime import datetime

from pynamodb.exceptions import DoesNotExist, UpdateError

from stepwise.core.schema import utcnow
from stepwise.core.tables import McpAuthItem, bind, condition_failed
from stepwise.mcp.authorization import (
    GrantKey,
    PendingAuthorization,
    StateProblem,
    StateRejected,
    StoredGrant,
)
from stepwise.settings import crypto

# The encryption context's key: the API may decrypt only under this prefix (template.yaml), never a
# tenant's settings.
CONTEXT_PREFIX = "mcp-oauth/"


def _grant_id(tenant_id: str, key: GrantKey) -> str:
    return f"grant#{tenant_id}#{key.id}"


def _state_id(state_hash: str) -> str:
    return f"state#{state_hash}"


def _context_key(item_id: str) -> str:
    return CONTEXT_PREFIX + item_id


class DynamoGrantStore:
    """The GrantStore of the deployed stack and the local one."""

    def load(self, tenant_id: str, key: GrantKey) -> StoredGrant | None:
        bind()
        item_id = _grant_id(tenant_id, key)
        try:
            item = McpAuthItem.get(item_id, consistent_read=True)
        except DoesNotExist:
            return None
        plain = crypto.decrypt(tenant_id, _context_key(item_id), [bytes(p) for p in item.ciphertext])
        return StoredGrant.model_validate_json(plain)

    def save(self, tenant_id: str, key: GrantKey, stored: StoredGrant) -> None:
        bind()
        item_id = _grant_id(tenant_id, key)
        parts, _ = crypto.encrypt(tenant_id, _context_key(item_id), stored.model_dump_json())
        McpAuthItem(item_id, tenant_id=tenant_id, ciphertext=parts, updated_at=utcnow()).save()

    def delete(self, tenant_id: str, key: GrantKey) -> None:
        bind()
        McpAuthItem(_grant_id(tenant_id, key)).delete()

    def put_pending(self, state_hash: str, record: PendingAuthorization) -> None:
        bind()
        item_id = _state_id(state_hash)
        parts, _ = crypto.encrypt(record.tenant_id, _context_key(item_id), record.model_dump_json())
        McpAuthItem(
            item_id,
            tenant_id=record.tenant_id,
            ciphertext=parts,
            updated_at=utcnow(),
            expires_at=record.expires_at,
        ).save(condition=McpAuthItem.id.does_not_exist())

    def open_pending(self, state_hash: str, nonce_hash: str) -> PendingAuthorization:
        bind()
        item_id = _state_id(state_hash)
        item = McpAuthItem(item_id)
        try:
            # One conditional write binds the flow: of two browsers opening its link, one gets it, and a
            # link opened again never replaces the first browser's nonce.
            item.update(
                actions=[McpAuthItem.nonce_hash.set(nonce_hash)],
                condition=McpAuthItem.id.exists()
                & McpAuthItem.used_at.does_not_exist()
                & McpAuthItem.nonce_hash.does_not_exist(),
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            # botocore retries a write whose answer was lost: the nonce on the item being ours (it is
            # random per opening) means the first attempt bound it.
            if self._holds(item_id, nonce_hash=nonce_hash):
                return self._record(item)
            raise StateRejected(self._why_not(item_id, "opened")) from None
        return self._record(item)

    def take_pending(self, state_hash: str, nonce_hash: str | None) -> PendingAuthorization:
        bind()
        item_id = _state_id(state_hash)
        item = McpAuthItem(item_id)
        if nonce_hash is None:
            raise StateRejected(self._why_not(item_id, "unbound"))
        used_at = utcnow()
        try:
            # One conditional write spends the state: of two callbacks racing, one gets it; and only the
            # browser holding the nonce its start link bound can spend it.
            item.update(
                actions=[McpAuthItem.used_at.set(used_at)],
                condition=McpAuthItem.id.exists()
                & McpAuthItem.used_at.does_not_exist()
                & (McpAuthItem.nonce_hash == nonce_hash),
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            # As above: our own first attempt, retried, spent it at our instant (to the millisecond).
            if self._holds(item_id, nonce_hash=nonce_hash, used_at=used_at):
                return self._record(item)
            raise StateRejected(self._why_not(item_id, "unbound")) from None
        return self._record(item)

    @staticmethod
    def _holds(item_id: str, *, nonce_hash: str, used_at: datetime | None = None) -> bool:
        """Whether the item already holds this call's own write."""
        try:
            found = McpAuthItem.get(
                item_id, consistent_read=True, attributes_to_get=["nonce_hash", "used_at"]
            )
        except DoesNotExist:
            return False
        return found.nonce_hash == nonce_hash and found.used_at == used_at

    @staticmethod
    def _why_not(item_id: str, otherwise: StateProblem) -> StateProblem:
        """Why a state's conditional write failed: unknown, used, or else `otherwise`."""
        try:
            found = McpAuthItem.get(item_id, consistent_read=True, attributes_to_get=["id", "used_at"])
        except DoesNotExist:
            return "unknown"
        return "used" if found.used_at is not None else otherwise

    @staticmethod
    def _record(item: McpAuthItem) -> PendingAuthorization:
        item.refresh(consistent_read=True)
        plain = crypto.decrypt(item.tenant_id, _context_key(item.id), [bytes(p) for p in item.ciphertext])
        return PendingAuthorization.model_validate_json(plain)

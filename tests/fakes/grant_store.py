"""An in-memory GrantStore (stepwise.mcp.authorization): the conformance client's, and any test's that
needs no DynamoDB. It keeps what the real one keeps, minus the encryption."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from stepwise.core.schema import utcnow
from stepwise.mcp.authorization import GrantKey, PendingAuthorization, StateRejected, StoredGrant, same_nonce
from stepwise.mcp.oauth import Pending


@dataclass
class _Pending:
    record: PendingAuthorization
    nonce_hash: str | None = None  # set once, when its start link is opened
    used: bool = False


class MemoryGrantStore:
    def __init__(self) -> None:
        self.grants: dict[tuple[str, GrantKey], StoredGrant] = {}
        self.pending: dict[str, _Pending] = {}  # by state hash

    def load(self, tenant_id: str, key: GrantKey) -> StoredGrant | None:
        return self.grants.get((tenant_id, key))

    def save(self, tenant_id: str, key: GrantKey, stored: StoredGrant) -> None:
        self.grants[(tenant_id, key)] = stored

    def delete(self, tenant_id: str, key: GrantKey) -> None:
        self.grants.pop((tenant_id, key), None)

    def put_pending(self, state_hash: str, record: PendingAuthorization) -> None:
        if state_hash in self.pending:
            raise ValueError("a state is issued once")
        self.pending[state_hash] = _Pending(record)

    def open_pending(self, state_hash: str, nonce_hash: str) -> PendingAuthorization:
        found = self._unused(state_hash)
        if found.nonce_hash is not None:
            raise StateRejected("opened")
        found.nonce_hash = nonce_hash
        return found.record

    def take_pending(self, state_hash: str, nonce_hash: str | None) -> PendingAuthorization:
        found = self._unused(state_hash)
        if not same_nonce(found.nonce_hash, nonce_hash):
            raise StateRejected("unbound")
        found.used = True
        return found.record

    def _unused(self, state_hash: str) -> _Pending:
        found = self.pending.get(state_hash)
        if found is None:
            raise StateRejected("unknown")
        if found.used:
            raise StateRejected("used")
        return found


def pending(expires_in: timedelta) -> PendingAuthorization:
    """An authorization in flight for tenant t1's linear server, expiring in `expires_in`."""
    return PendingAuthorization(
        tenant_id="t1",
        agent_id="a1",
        server="linear",
        server_created_at=utcnow(),
        pending=Pending(
            code_verifier="v" * 64, redirect_uri="https://api.example/v1/integrations/mcp/oauth/callback"
        ),
        expires_at=utcnow() + expires_in,
        authorization_url="https://as.example/authorize?state=s1",
    )

"""An in-memory GrantStore (stepwise.mcp.authorization): the conformance client's, and any test's that
needs no DynamoDB. It keeps what the real one keeps, minus the encryption."""

from __future__ import annotations

from stepwise.mcp.authorization import GrantKey, PendingAuthorization, StateRejected, StoredGrant


class MemoryGrantStore:
    def __init__(self) -> None:
        self.grants: dict[tuple[str, GrantKey], StoredGrant] = {}
        self.pending: dict[str, tuple[PendingAuthorization, bool]] = {}  # state hash -> (record, used)

    def load(self, tenant_id: str, key: GrantKey) -> StoredGrant | None:
        return self.grants.get((tenant_id, key))

    def save(self, tenant_id: str, key: GrantKey, stored: StoredGrant) -> None:
        self.grants[(tenant_id, key)] = stored

    def delete(self, tenant_id: str, key: GrantKey) -> None:
        self.grants.pop((tenant_id, key), None)

    def put_pending(self, state_hash: str, record: PendingAuthorization) -> None:
        if state_hash in self.pending:
            raise ValueError("a state is issued once")
        self.pending[state_hash] = (record, False)

    def take_pending(self, state_hash: str) -> PendingAuthorization:
        found = self.pending.get(state_hash)
        if found is None:
            raise StateRejected("unknown")
        record, used = found
        if used:
            raise StateRejected("used")
        self.pending[state_hash] = (record, True)
        return record

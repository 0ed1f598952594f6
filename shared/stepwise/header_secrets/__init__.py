"""Static header secrets at rest: the values of the headers tenants give custom HTTP tools, http hooks
and MCP servers (an `Authorization`, an `X-Api-Key`) are sealed under the settings key when the agent,
hook or server is written, and opened only where a call is made.

Each value is KMS ciphertext under the encryption context {tenant_id, key: "headers/<lower-case
name>"} (stepwise.settings.crypto), so it decrypts only for its tenant and header name, and IAM can let
a function decrypt headers (`headers/*`) without letting it read the tenant's settings. A value with no
SEALED_PREFIX is one stored before sealing: it is used as it is, and sealed by the agent's next write or
by the migration (`stepwise migrate seal-headers`, dev/stepwise_cli/migrate.py).
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping
from typing import Any

from stepwise.core.masking import SEALED_PREFIX, is_sealed
from stepwise.settings import crypto

CONTEXT_PREFIX = "headers/"


class HeaderUnreadable(Exception):
    """A sealed header does not decrypt for this tenant and name (copied from elsewhere, or altered)."""


def _key(name: str) -> str:
    return CONTEXT_PREFIX + name.lower()


def seal(tenant_id: str, headers: Mapping[str, str]) -> dict[str, str]:
    """The headers with every plain value sealed (sealed ones, and empty ones, are kept as they are)."""
    sealed: dict[str, str] = {}
    for name, value in headers.items():
        if not value or is_sealed(value):
            sealed[name] = value
            continue
        parts, _ = crypto.encrypt(tenant_id, _key(name), value)
        sealed[name] = SEALED_PREFIX + ".".join(base64.b64encode(p).decode() for p in parts)
    return sealed


def open_headers(tenant_id: str, headers: Mapping[str, str]) -> dict[str, str]:
    """The headers as they are sent: sealed values decrypted (HeaderUnreadable when one does not),
    plain ones (stored before sealing) as they are."""
    return {
        name: _opened(tenant_id, name.lower(), value) if is_sealed(value) else value
        for name, value in headers.items()
    }


# One KMS call per value per warm function, not per call: the plaintext stays in this process only.
@functools.lru_cache(maxsize=512)
def _opened(tenant_id: str, name: str, value: str) -> str:
    try:
        parts = [base64.b64decode(p, validate=True) for p in value.removeprefix(SEALED_PREFIX).split(".")]
        return crypto.decrypt(tenant_id, _key(name), parts)
    except (ValueError, crypto.SettingUnreadable) as exc:
        raise HeaderUnreadable(f"header {name!r} does not decrypt for tenant {tenant_id}") from exc


def _header_maps(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The header maps of an agent's stored JSON: its custom HTTP tools', MCP servers' and http hooks'."""
    found = [t.get("headers") for t in doc.get("tools") or [] if t.get("type") == "http"]
    found += [s.get("headers") for s in doc.get("mcp_servers") or []]
    found += [(h.get("config") or {}).get("headers") for h in doc.get("hooks") or []]
    return [h for h in found if isinstance(h, Mapping)]


def has_plain(doc: Mapping[str, Any]) -> bool:
    """Whether an agent's stored JSON still holds a header value in the clear (written before sealing)."""
    return any(value and not is_sealed(value) for headers in _header_maps(doc) for value in headers.values())


def seal_agent_doc(tenant_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    """An agent's stored JSON with the header values of its custom HTTP tools, http hooks and MCP
    servers sealed: every write of an agent goes through here, so an agent stored before sealing is
    sealed by its next write (or by `reseal_agent`). Values already sealed cost no KMS call."""

    if not has_plain(doc):
        return doc

    def sealed_headers(entry: dict[str, Any]) -> dict[str, Any]:
        headers = entry.get("headers")
        if isinstance(headers, dict) and any(v and not is_sealed(v) for v in headers.values()):
            return {**entry, "headers": seal(tenant_id, headers)}
        return entry

    out = dict(doc)
    out["tools"] = [sealed_headers(t) if t.get("type") == "http" else t for t in doc.get("tools") or []]
    out["mcp_servers"] = [sealed_headers(s) for s in doc.get("mcp_servers") or []]
    out["hooks"] = [
        {**h, "config": sealed_headers(h["config"])} if isinstance(h.get("config"), dict) else h
        for h in doc.get("hooks") or []
    ]
    return out

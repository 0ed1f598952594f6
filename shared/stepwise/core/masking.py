"""What the API shows of the secrets tenants configure: header names, never their values.

Headers on custom HTTP tools, http hooks and MCP servers usually carry credentials (`Authorization`,
`X-Api-Key`). They are stored as given and sent as given, but every answer that shows a tool, a hook or
a server shows them through `mask_headers`, the one place that decides how a secret looks when shown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "********"


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The header names, each with the value replaced by MASK."""
    return dict.fromkeys(headers, MASK)


def public_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A tool's JSON as the API shows it (a custom HTTP tool's header values masked)."""
    shown = dict(tool)
    if isinstance(shown.get("headers"), Mapping):
        shown["headers"] = mask_headers(shown["headers"])
    return shown


def public_hook(hook: Mapping[str, Any]) -> dict[str, Any]:
    """A hook's JSON as the API shows it (an http hook's header values masked)."""
    shown = dict(hook)
    config = shown.get("config")
    if isinstance(config, Mapping) and isinstance(config.get("headers"), Mapping):
        shown["config"] = {**config, "headers": mask_headers(config["headers"])}
    return shown


# Argument names whose values are credentials, whatever the tool: a person reviewing the effects
# ledger needs the target (the recipient, the record id), not the token the model was handed.
_SECRET_NAMES = ("password", "passwd", "secret", "token", "api_key", "apikey", "authorization", "credential")
ARGUMENTS_LIMIT = 2_000  # characters of JSON of one call's masked arguments an effect entry keeps


def mask_arguments(arguments: Any) -> Any:
    """Tool arguments as the effects ledger shows them: values under secret-looking names masked, at
    any depth (the rest is what the model wrote, which the run's events show already)."""
    if isinstance(arguments, Mapping):
        return {
            key: MASK
            if any(name in str(key).lower().replace("-", "_") for name in _SECRET_NAMES)
            else mask_arguments(value)
            for key, value in arguments.items()
        }
    if isinstance(arguments, list | tuple):
        return [mask_arguments(value) for value in arguments]
    return arguments


# A header value sealed at rest (stepwise.header_secrets): KMS ciphertext, opened only where a call is
# made. Told apart by this prefix, so an item written before sealing (a plain value) still reads.
SEALED_PREFIX = "sw-sealed:v1:"


def is_sealed(value: str) -> bool:
    return value.startswith(SEALED_PREFIX)


# Text a process wrote that the API may quote (a stdio MCP server's stderr): what looks like a credential
# is masked, wherever it is. `NAME=value` / `name: value` under a secret-looking name, AWS access key ids,
# and any long unbroken token (keys, JWTs, session tokens are all long runs of base64-ish characters).
_NAMED_SECRET = re.compile(
    r"(?i)([\w.-]*(?:" + "|".join(_SECRET_NAMES) + r"|key)[\w.-]*[\"']?\s*[=:]\s*)[\"']?[^\s\"',;]+"
)
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|AROA|AIDA)[0-9A-Z]{16}\b")
_SCHEME_TOKEN = re.compile(r"(?i)\b(bearer|basic)\s+[^\s\"',;]+")
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+/_=.-]{32,}")
EXCERPT_LIMIT = 300  # characters of such text quoted


def _looks_secret(token: str) -> bool:
    """A long run that is a key rather than a path or a word: mixed case with digits (base64, JWTs,
    AWS secrets), all hex, or one unbroken run without the `/` and `.` of paths and names."""
    mixed = (
        any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() for c in token)
    )
    return (
        mixed
        or re.fullmatch(r"[0-9a-fA-F]+", token) is not None
        or re.fullmatch(r"[\w-]{40,}", token) is not None
    )


def masked_excerpt(text: str, limit: int = EXCERPT_LIMIT) -> str:
    """The end of `text` (what a failing process says last), at most `limit` characters, credentials
    masked. Masked before it is cut, so no secret is left half-shown at the cut."""
    masked = text.replace("\x00", "\n")  # an environment dump's separators
    masked = _SCHEME_TOKEN.sub(lambda m: f"{m.group(1)} {MASK}", masked)
    masked = _NAMED_SECRET.sub(lambda m: m.group(1) + MASK, masked)
    masked = _AWS_KEY_ID.sub(MASK, masked)
    masked = _LONG_TOKEN.sub(lambda m: MASK if _looks_secret(m.group(0)) else m.group(0), masked)
    return masked if len(masked) <= limit else "…" + masked[-(limit - 1) :]

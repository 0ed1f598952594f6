"""Signed, expiring approval links. The Step Functions task token never leaves the server.

A token is `<payload>.<signature>`, both base64url without padding:

    payload   = base64url(JSON [1, interaction_id, tenant_id, expires_at as epoch seconds])
    signature = base64url(HMAC-SHA256(secret, "stepwise.approval-link." + payload))

JSON rather than a delimiter, so no id can contain a character that shifts the fields. The MAC covers
the payload exactly as sent and is checked before the payload is decoded, and the encoded signature is
compared in constant time as text, so there is one valid spelling of each token (base64's unused low
bits cannot be flipped to make a "different" token that still verifies). The prefix keeps these MACs
apart from anything else the same secret might ever sign.

What `verify` proves: the link was issued by us, for this interaction in this tenant, and has not
expired. What it cannot prove: that it has not been used. Single use is the caller's job, and it must
be done as one conditional write: update the interaction `pending → answered` with a condition on
`status = pending` (and on the tenant from the claims being the key's tenant), then send the task token
only if that write won. A lost condition means "already decided" (409). Pages that only display
(`GET /v1/approvals/{token}`) verify the link but never write: mail scanners prefetch links.

The link's expiry should be the approval state's deadline: after it the task token is dead anyway.

Signing always uses the current secret; verifying accepts the current one, then the previous one
(`verifying_secrets`), so rotating the secret does not end the links already sent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from stepwise.approvals import Decision
from stepwise.approvals.display import as_utc
from stepwise.core import config, credentials
from stepwise.core.config import ConfigError
from stepwise.core.errors import Forbidden, Gone

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

# What `verify` and `unseal` take: one secret, or secrets tried in order until one matches (an
# iterator is consumed lazily, so a secret after the one that matched is never fetched).
Secrets = bytes | Iterable[bytes]

SECRET_ENV = config.Links.variable("link_secret")
SECRET_ARN_ENV = config.Links.variable("link_secret_arn")
MIN_SECRET_BYTES = 32  # HMAC-SHA256's own output size: a shorter key is the weakest link
# Seconds a secret read from Secrets Manager is reused: the delay before a rotation takes effect, the
# same as for the deployment's other secrets.
MAX_AGE_SECONDS = credentials.MAX_AGE_SECONDS
# Secrets Manager's version stages: the value that signs, and the one it replaced at the last rotation.
CURRENT = "AWSCURRENT"
PREVIOUS = "AWSPREVIOUS"
MAX_TOKEN_LENGTH = 1024  # far above any real token; refused before any work is done
APPROVALS_PATH = "/v1/approvals/"

_VERSION = 1
_MAC_CONTEXT = b"stepwise.approval-link."
_SIGNATURE_CHARS = 43  # 32 bytes in unpadded base64url
_TOKEN = re.compile(rf"([A-Za-z0-9_-]+)\.([A-Za-z0-9_-]{{{_SIGNATURE_CHARS}}})")
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")


class ForgedLink(Forbidden):
    """Not a link we issued, or one that was altered: 403. `reason` is for logs, never for the page."""

    code = "forged_link"

    def __init__(self, reason: str) -> None:
        super().__init__("this approval link is not valid")
        self.reason = reason


class ExpiredLink(Gone):
    """A genuine link past its deadline: 410. `claims` says which interaction it was for."""

    code = "link_expired"

    def __init__(self, claims: LinkClaims) -> None:
        super().__init__("this approval link has expired")
        self.claims = claims


@dataclass(frozen=True)
class LinkClaims:
    interaction_id: str
    tenant_id: str
    expires_at: datetime  # UTC, whole seconds


def sign(interaction_id: str, tenant_id: str, expires_at: datetime, secret: bytes) -> str:
    """A URL-safe token for the interaction, valid until `expires_at` (timezone-aware)."""
    if not interaction_id or not tenant_id:
        raise ValueError("interaction_id and tenant_id must not be empty")
    # Rounded down: a link may die up to a second early, never late.
    expires = int(as_utc(expires_at).timestamp())
    return seal(_MAC_CONTEXT, [_VERSION, interaction_id, tenant_id, expires], secret)


def verify(token: str, secret: Secrets, now: datetime) -> LinkClaims:
    """The claims of a genuine, unexpired token; raises ForgedLink or ExpiredLink. The API passes
    `verifying_secrets()`, so a link signed before the last rotation still verifies.

    Authenticity is checked first, so an altered token is forged (403) even when it is also expired.
    Single use is not checked here: see the module docstring.
    """
    claims = _claims(unseal(_MAC_CONTEXT, token, secret))
    if as_utc(now) >= claims.expires_at:
        raise ExpiredLink(claims)
    return claims


def seal(context: bytes, fields: list[Any], secret: bytes) -> str:
    """A token carrying `fields` (JSON), MAC'd under `context`: the format described above, for any
    other signed, URL-safe credential (the follow URLs of stepwise.follow use it with their own context,
    so no token of one kind can ever pass for the other)."""
    payload = _b64encode(json.dumps(fields, separators=(",", ":")).encode())
    return f"{payload}.{_mac(_checked_secret(secret), payload, context)}"


def unseal(context: bytes, token: str, secret: Secrets) -> list[Any]:
    """The fields of a token `seal` made under `context` with `secret` (or any of `secret`, tried in
    order); raises ForgedLink otherwise. Authenticity is checked before anything is decoded. This is
    the one MAC check of every signed URL: approval pages, Slack buttons and follow URLs."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_LENGTH:
        raise ForgedLink("not a token")
    match = _TOKEN.fullmatch(token)
    if match is None:
        raise ForgedLink("malformed token")
    payload, signature = match.groups()
    keys = [secret] if isinstance(secret, bytes | bytearray) else secret
    tried = False
    for key in keys:
        tried = True
        if hmac.compare_digest(_mac(_checked_secret(key), payload, context), signature):
            break
    else:
        if not tried:
            raise ValueError("no approval link secret to verify with")
        raise ForgedLink("bad signature")
    # The MAC matched, so this is our own writing; a failure here is a format we no longer read.
    try:
        fields = json.loads(_b64decode(payload))
    except (ValueError, binascii.Error) as exc:
        raise ForgedLink(f"unreadable payload: {exc}") from None
    if not isinstance(fields, list):
        raise ForgedLink("unknown payload version")
    return fields


def approval_url(base_url: str, token: str, *, decision: Decision | None = None) -> str:
    """The approval page for `token` under the API's origin `base_url` (e.g. `https://api.example.com`).

    `decision` adds `?decision=approve|deny`, which the page uses only to highlight that button: a GET
    never decides, so the human still presses it.
    """
    if not base_url.lower().startswith(("https://", "http://")):
        raise ValueError(f"base_url must be an http(s) URL, not {base_url!r}")
    url = f"{base_url.rstrip('/')}{APPROVALS_PATH}{quote(token, safe='')}"
    return f"{url}?decision={decision}" if decision else url


# --- The secret -----------------------------------------------------------------------------------


def secret() -> bytes:
    """The link secret of this deployment (its current version): what the API passes to `sign`."""
    return load_secret()


def verifying_secrets() -> Iterator[bytes]:
    """What the API passes to `verify` (and follow URLs' verify): the current secret, then, only if
    that did not match, the previous version from Secrets Manager when there is one. So a rotation
    leaves the links signed before it valid until the next rotation (or their expiry), and a link two
    rotations old is refused. The local variable has no previous version."""
    yield load_secret()
    variables = config.links()
    if variables.link_secret:
        return
    arn = variables.link_secret_arn
    previous = _from_secrets_manager(arn, PREVIOUS) if arn else None
    if previous is not None:
        yield previous


def load_secret() -> bytes:
    """`STEPWISE_LINK_SECRET` if set (the local stack sets it), else the Secrets Manager secret named by
    `LINK_SECRET_ARN` (in AWS), read through Powertools Parameters and reused for MAX_AGE_SECONDS: a
    rotated secret reaches every warm function within that time, with no redeploy and no read per
    request. Neither set is a ConfigError.

    This is the current version. The previous one keeps verifying (`verifying_secrets`), so one
    rotation does not end pending links; a second rotation ends those signed before the first."""
    variables = config.links()
    if variables.link_secret:
        return parse_secret(variables.link_secret, source=SECRET_ENV)
    arn = variables.link_secret_arn
    if arn:
        current = _from_secrets_manager(arn, CURRENT)
        if current is None:
            raise ConfigError(f"secret {arn} has no {CURRENT} value: put the approval link secret there")
        return current
    raise ConfigError(
        f"no approval link secret: set {SECRET_ENV} (locally) or {SECRET_ARN_ENV} (a Secrets Manager "
        'secret); generate one with: python -c "import secrets; print(secrets.token_urlsafe(32))"'
    )


def reset() -> None:
    """Forget the cached link secret versions, and the Secrets Manager clients that read them (tests,
    and the local stack when it sets the environment late); the environment variable is read on every
    call anyway. Only this secret's cache: the deployment's other secrets stay cached."""
    _providers.clear()


def parse_secret(value: str, *, source: str) -> bytes:
    """The key bytes a configured secret stands for.

    Base64 (standard or URL-safe alphabet, padding optional) that decodes to at least MIN_SECRET_BYTES
    is decoded, so `secrets.token_urlsafe(32)` and `openssl rand -base64 32` both work; anything else is
    taken as UTF-8 text. Either way the key must be at least MIN_SECRET_BYTES long.
    """
    text = value.strip()
    key = _decode_base64(text)
    if key is None or len(key) < MIN_SECRET_BYTES:
        key = text.encode()
    if len(key) < MIN_SECRET_BYTES:
        raise ConfigError(f"{source} is too short: the approval link secret needs {MIN_SECRET_BYTES} bytes")
    return key


# One Powertools provider per version stage, each with its own cache: Powertools keys its cache by the
# secret's name only, not by the VersionStage passed to the SDK, so one provider would hand back the
# current value when asked for the previous one (or the reverse).
_providers: dict[str, SecretsProvider] = {}


def _provider(stage: str) -> SecretsProvider:
    if stage not in _providers:
        # Imported here: only a function that really reads the secret from AWS pays for boto3.
        from aws_lambda_powertools.utilities.parameters import SecretsProvider

        class StageProvider(SecretsProvider):
            def _get(self, name: str, **sdk_options: Any) -> str | bytes:
                try:
                    return super()._get(name, **sdk_options, VersionStage=stage)
                except self.client.exceptions.ResourceNotFoundException:
                    # No version at this stage (a secret never rotated has no AWSPREVIOUS). Returned
                    # as empty so Powertools caches the absence for max_age like a value: a stream of
                    # forged tokens costs no Secrets Manager read each.
                    return b""

        _providers[stage] = StageProvider()
    return _providers[stage]


def _from_secrets_manager(arn: str, stage: str) -> bytes | None:
    """The key at `stage`, None when the secret has no version there."""
    value = _provider(stage).get(arn, max_age=MAX_AGE_SECONDS)
    source = f"secret {arn} ({stage})"
    if isinstance(value, str) and value:
        return parse_secret(value, source=source)
    binary = bytes(value) if isinstance(value, bytes | bytearray) else b""
    if not binary:
        return None
    if len(binary) < MIN_SECRET_BYTES:
        raise ConfigError(f"{source} is too short: the approval link secret needs {MIN_SECRET_BYTES} bytes")
    return binary


# --- Encoding -------------------------------------------------------------------------------------


def _checked_secret(secret: bytes) -> bytes:
    # An empty key would let anyone compute valid signatures.
    if not secret:
        raise ValueError("the approval link secret is empty")
    return secret


def _mac(secret: bytes, payload: str, context: bytes = _MAC_CONTEXT) -> str:
    digest = hmac.new(secret, context + payload.encode("ascii"), hashlib.sha256).digest()
    return _b64encode(digest)


def _claims(fields: list[Any]) -> LinkClaims:
    if not (len(fields) == 4 and fields[0] == _VERSION):
        raise ForgedLink("unknown payload version")
    _, interaction_id, tenant_id, expires = fields
    if not (
        isinstance(interaction_id, str)
        and interaction_id
        and isinstance(tenant_id, str)
        and tenant_id
        and type(expires) is int
    ):
        raise ForgedLink("unexpected payload fields")
    return LinkClaims(interaction_id, tenant_id, datetime.fromtimestamp(expires, UTC))


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _decode_base64(text: str) -> bytes | None:
    if not _BASE64.fullmatch(text):
        return None
    standard = text.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except binascii.Error:
        return None

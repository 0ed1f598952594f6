"""Amazon SNS messages posted to a public route: their signature checked as SNS documents it
(https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html).

The string to sign is the message's fields in a fixed order, each name then its value on a line of its
own; the signature is RSA PKCS#1 v1.5 over it with SHA-1 (SignatureVersion 1) or SHA-256 (2), by the
key of the certificate at `SigningCertURL`. That URL must be Amazon's SNS host over HTTPS (the
STEPWISE_SNS_CERT_URL_PATTERN the tests alone change), and is fetched through the SSRF guard, once per
process per URL.
"""

from __future__ import annotations

import base64
import binascii
import re
import threading
from typing import Any

import httpx
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from stepwise.core import config
from stepwise.net.outbound import OutboundRefused
from stepwise.net.ssrf import guarded_client

FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
    "UnsubscribeConfirmation": (
        "Message",
        "MessageId",
        "SubscribeURL",
        "Timestamp",
        "Token",
        "TopicArn",
        "Type",
    ),
}
_CERTS: dict[str, rsa.RSAPublicKey] = {}
_LOCK = threading.Lock()


class Refused(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CertificateUnavailable(Refused):
    """The certificate could not be fetched now: SNS's retry may find it."""


def string_to_sign(message: dict[str, Any]) -> bytes:
    kind = str(message.get("Type", ""))
    if kind not in FIELDS:
        raise Refused(f"not an SNS message type: {kind or 'none'}")
    lines = []
    for name in FIELDS[kind]:
        if name == "Subject" and message.get(name) is None:
            continue  # a notification without a subject signs without the field
        value = message.get(name)
        if not isinstance(value, str):
            raise Refused(f"the SNS message has no {name}")
        lines += [name, value]
    return ("\n".join(lines) + "\n").encode()


def certificate_key(url: str) -> rsa.RSAPublicKey:
    if not re.fullmatch(config.inbound_mail().sns_cert_url, url):
        raise Refused("SigningCertURL is not an Amazon SNS certificate URL")
    with _LOCK:
        found = _CERTS.get(url)
    if found is not None:
        return found
    try:
        with guarded_client(timeout=5, max_response_bytes=64 * 1024) as client:
            response = client.get(url)
    except (OutboundRefused, httpx.HTTPError) as exc:
        raise CertificateUnavailable(f"the signing certificate could not be fetched: {exc}") from None
    if response.status_code != 200:
        raise CertificateUnavailable(
            f"the signing certificate could not be fetched: HTTP {response.status_code}"
        )
    try:
        key = x509.load_pem_x509_certificate(response.content).public_key()
    except ValueError:
        raise Refused("the signing certificate is not a PEM certificate") from None
    if not isinstance(key, rsa.RSAPublicKey):
        raise Refused("the signing certificate's key is not RSA")
    with _LOCK:
        _CERTS[url] = key
    return key


def verify(message: dict[str, Any]) -> None:
    """Returns when `message` (the POSTed JSON) is signed by SNS; Refused says why not."""
    version = str(message.get("SignatureVersion", ""))
    digest: hashes.HashAlgorithm
    if version == "1":
        digest = hashes.SHA1()  # SNS's SignatureVersion 1 is SHA1withRSA; 2 is SHA-256
    elif version == "2":
        digest = hashes.SHA256()
    else:
        raise Refused(f"unknown SignatureVersion {version or 'none'}")
    try:
        signature = base64.b64decode(str(message.get("Signature", "")), validate=True)
    except (binascii.Error, ValueError):
        raise Refused("the signature is not base64") from None
    payload = string_to_sign(message)
    key = certificate_key(str(message.get("SigningCertURL", "")))
    try:
        key.verify(signature, payload, padding.PKCS1v15(), digest)
    except InvalidSignature:
        raise Refused("the SNS signature does not verify") from None

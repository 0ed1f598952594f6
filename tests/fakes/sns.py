"""A fake SNS publisher: a test RSA key and its self-signed certificate, served by a loopback Receiver,
and messages signed as SNS signs them (its documented string to sign, written out here on its own so
that the verifier is checked against an independent reading of the documentation)."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from tests.fakes.receiver import Receiver, Reply

CERT_PATH = "/SimpleNotificationService-test.pem"
# What the tests let the verifier fetch certificates from instead of Amazon's SNS hosts.
LOOPBACK_CERTS = r"^http://127\.0\.0\.1:\d+/[^?#]+\.pem$"


def _certificate(key: rsa.RSAPrivateKey) -> bytes:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.test")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


class FakeSns:
    def __init__(self, receiver: Receiver, topic_arn: str) -> None:
        self.receiver = receiver
        self.topic_arn = topic_arn
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        receiver.replies[CERT_PATH] = Reply(
            body=_certificate(self.key), content_type="application/x-pem-file"
        )
        receiver.replies["/confirm"] = Reply(body={"ConfirmSubscriptionResponse": {}})

    @property
    def cert_url(self) -> str:
        return self.receiver.url + CERT_PATH

    def sign(self, message: dict[str, Any], version: str = "2") -> dict[str, Any]:
        names = ["Message", "MessageId"]
        if message["Type"] == "Notification":
            names += ["Subject"] if "Subject" in message else []
        else:
            names += ["SubscribeURL"]
        names += (
            ["Timestamp"] + (["Token"] if message["Type"] != "Notification" else []) + ["TopicArn", "Type"]
        )
        text = "".join(f"{name}\n{message[name]}\n" for name in names)
        digest = hashes.SHA1() if version == "1" else hashes.SHA256()
        signature = self.key.sign(text.encode(), padding.PKCS1v15(), digest)
        return {
            **message,
            "SignatureVersion": version,
            "Signature": base64.b64encode(signature).decode(),
            "SigningCertURL": self.cert_url,
        }

    def notification(self, payload: dict[str, Any], *, topic_arn: str | None = None) -> bytes:
        message = {
            "Type": "Notification",
            "MessageId": str(uuid.uuid4()),
            "TopicArn": topic_arn or self.topic_arn,
            "Subject": "Amazon SES Email Receipt Notification",
            "Message": json.dumps(payload),
            "Timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z",
        }
        return json.dumps(self.sign(message)).encode()

    def confirmation(self) -> bytes:
        message = {
            "Type": "SubscriptionConfirmation",
            "MessageId": str(uuid.uuid4()),
            "Token": "token-1",
            "TopicArn": self.topic_arn,
            "Message": "You have chosen to subscribe to the topic.",
            "SubscribeURL": self.receiver.url + "/confirm?Action=ConfirmSubscription&Token=token-1",
            "Timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        }
        return json.dumps(self.sign(message, version="1")).encode()


def ses_received(bucket: str, key: str, message_id: str, recipients: list[str]) -> dict[str, Any]:
    """The SES notification of a message its receipt rule stored in S3 (SES's documented shape)."""
    return {
        "notificationType": "Received",
        "mail": {
            "timestamp": datetime.now(UTC).isoformat(),
            "source": "sender@example.com",
            "messageId": message_id,
            "destination": recipients,
            "headersTruncated": False,
        },
        "receipt": {
            "recipients": recipients,
            "spamVerdict": {"status": "PASS"},
            "virusVerdict": {"status": "PASS"},
            "action": {
                "type": "S3",
                "topicArn": "arn:aws:sns:us-east-1:123456789012:stepwise-ses-inbound",
                "bucketName": bucket,
                "objectKeyPrefix": "inbound/ses/",
                "objectKey": key,
            },
        },
    }

"""A fake Google on loopback for gmail triggers: the OAuth token endpoint, the Gmail API calls a
trigger makes, Google's signing keys, and Pub/Sub pushes with OIDC tokens signed by a test key."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from tests.fakes.receiver import Receiver, Reply

AUDIENCE = "https://stepwise.test/v1/integrations/gmail/push"
KID = "test-key-1"


class FakeGoogle:
    def __init__(self, receiver: Receiver, mailbox: str) -> None:
        self.receiver = receiver
        self.mailbox = mailbox
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        receiver.replies["/certs"] = Reply(body={"keys": [{**jwk, "kid": KID, "alg": "RS256", "use": "sig"}]})
        # expires_in under the refresh margin: every later call refreshes first (the MCP OAuth rule).
        receiver.replies["/token"] = Reply(
            body={"access_token": "at-1", "token_type": "Bearer", "expires_in": 30, "refresh_token": "rt-1"}
        )
        receiver.replies["/gmail/v1/users/me/profile"] = Reply(body={"emailAddress": mailbox})
        self.watch(days=7)

    def env(self) -> dict[str, str]:
        url = self.receiver.url
        return {
            "GOOGLE_CLIENT_ID": "client-1",
            "GOOGLE_CLIENT_SECRET": "client-secret-1",
            "GMAIL_PUBSUB_TOPIC": "projects/p/topics/gmail",
            "GMAIL_PUSH_AUDIENCE": AUDIENCE,
            "GOOGLE_AUTH_URL": f"{url}/auth",
            "GOOGLE_TOKEN_URL": f"{url}/token",
            "GMAIL_API_URL": url,
            "GOOGLE_CERTS_URL": f"{url}/certs",
        }

    def watch(self, *, days: float, history_id: str = "100") -> int:
        expiration = int((time.time() + days * 86400) * 1000)
        self.receiver.replies["/gmail/v1/users/me/watch"] = Reply(
            body={"historyId": history_id, "expiration": str(expiration)}
        )
        return expiration

    def inbox(self, history_id: str, *messages: tuple[str, str, bytes]) -> None:
        """What history.list answers next: these (id, thread id, raw MIME) added to INBOX."""
        added = [{"message": {"id": m, "threadId": t, "labelIds": ["INBOX"]}} for m, t, _ in messages]
        self.receiver.replies["/gmail/v1/users/me/history"] = Reply(
            body={"history": [{"id": history_id, "messagesAdded": added}], "historyId": history_id}
        )
        for message_id, thread_id, raw in messages:
            self.receiver.replies[f"/gmail/v1/users/me/messages/{message_id}"] = Reply(
                body={"id": message_id, "threadId": thread_id, "raw": base64.urlsafe_b64encode(raw).decode()}
            )

    def token(self, *, audience: str = AUDIENCE, key: Any = None, expires_in: int = 3600) -> str:
        now = int(time.time())
        claims = {
            "iss": "https://accounts.google.com",
            "aud": audience,
            "iat": now,
            "exp": now + expires_in,
            "email": "push@p.iam.gserviceaccount.com",
            "email_verified": True,
            "sub": "1234",
        }
        return jwt.encode(claims, key or self.key, algorithm="RS256", headers={"kid": KID})

    def push(self, message_id: str, history_id: str) -> bytes:
        data = json.dumps({"emailAddress": self.mailbox, "historyId": int(history_id)}).encode()
        envelope = {
            "message": {
                "data": base64.b64encode(data).decode(),
                "messageId": message_id,
                "publishTime": "now",
            },
            "subscription": "projects/p/subscriptions/stepwise",
        }
        return json.dumps(envelope).encode()

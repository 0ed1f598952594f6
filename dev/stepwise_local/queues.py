"""Lambda's SQS event source mappings in the local stack: poll the template's queues (moto's, in process)
and invoke their functions with the batches, as Lambda's pollers do.

moto can map a queue to a function itself, but it invokes the function inside SendMessage, on the
sender's thread: a step that queues a webhook would wait for its delivery, and a message the function
reports failed would come straight back. So the local stack creates no mapping in moto and polls here
instead, with Lambda's semantics: a long-polling receive of up to BatchSize messages, the SQS event
shape with the message's real attributes (ApproximateReceiveCount included), the messages of a batch
that succeeded deleted, and with ReportBatchItemFailures only those the function reported kept. A kept
message comes back when its visibility timeout ends (moto keeps time like SQS), which is what a
function's ChangeMessageVisibility sets; the queue's redrive policy moves it to its dead-letter queue
after maxReceiveCount receives.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from stepwise.core import aws
from stepwise_local.lambdas import FunctionError

log = logging.getLogger("stepwise_local")

Invoke = Callable[[str, dict[str, Any]], Any]  # (function name or ARN, payload) -> result
Resolve = Callable[[Any], Any]
REGION = "us-east-1"


@dataclass(frozen=True)
class Mapping:
    """One `Type: SQS` event of a function in template.yaml."""

    function: str  # logical id
    queue_url: str
    queue_arn: str
    batch_size: int
    report_failures: bool  # FunctionResponseTypes has ReportBatchItemFailures


def mappings(functions: dict[str, Any], resolve: Resolve, url_of: Callable[[str], str]) -> list[Mapping]:
    """The SQS event sources of the template's functions; `url_of` maps a queue ARN to its URL."""
    found = []
    for logical, res in functions.items():
        for event in (res["Properties"].get("Events") or {}).values():
            if event.get("Type") != "SQS":
                continue
            props = resolve(event.get("Properties", {}))
            arn = str(props["Queue"])
            found.append(
                Mapping(
                    function=logical,
                    queue_url=url_of(arn),
                    queue_arn=arn,
                    batch_size=int(props.get("BatchSize", 10)),
                    report_failures="ReportBatchItemFailures" in (props.get("FunctionResponseTypes") or []),
                )
            )
    return found


def event_of(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    """The event Lambda sends a function for `messages` as ReceiveMessage returned them."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
            for m in messages
        ]
    }


class LocalQueues:
    """One poller thread per mapping. `poll_once` does one receive-and-invoke, for tests that drive it."""

    def __init__(self, mappings: list[Mapping], invoke: Invoke, *, wait_seconds: int = 1) -> None:
        self.mappings = mappings
        self._invoke = invoke
        self._wait = wait_seconds
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self._threads:
            return
        aws.client("sqs")  # built here: boto3 clients are not safe to create from two threads
        for mapping in self.mappings:
            thread = threading.Thread(
                target=self._poll, args=(mapping,), name=f"local-sqs-{mapping.function}"
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()
        self._stop.clear()

    def _poll(self, mapping: Mapping) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once(mapping, wait_seconds=self._wait)
            except Exception:  # a broken poll must not end the poller; the next one tries again
                log.exception("local queue poll failed for %s", mapping.function)
                self._stop.wait(1.0)

    def poll_once(self, mapping: Mapping, *, wait_seconds: int = 0) -> int:
        """Receive one batch and hand it to the function; how many messages it held."""
        sqs = aws.client("sqs")
        received = sqs.receive_message(
            QueueUrl=mapping.queue_url,
            MaxNumberOfMessages=min(mapping.batch_size, 10),
            WaitTimeSeconds=wait_seconds,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not received:
            return 0
        try:
            result = self._invoke(mapping.function, event_of(received, mapping.queue_arn))
        except FunctionError as err:
            # Lambda keeps the whole batch: each message returns when its visibility timeout ends.
            log.warning("%s failed on a batch: %s", mapping.function, err.payload.get("errorMessage"))
            return len(received)
        kept = set()
        if mapping.report_failures and isinstance(result, dict):
            kept = {f.get("itemIdentifier") for f in result.get("batchItemFailures") or []}
        done = [m for m in received if m["MessageId"] not in kept]
        if done:
            sqs.delete_message_batch(
                QueueUrl=mapping.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
            )
        return len(received)

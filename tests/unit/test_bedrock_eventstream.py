"""The Bedrock fake's event-stream encoder against botocore's decoder, the one litellm reads with."""

import json

import pytest
from botocore.eventstream import ChecksumMismatch, EventStreamBuffer

from tests.fakes.bedrock_server import BedrockReply, _stream_events, encode_event, event


def decoded(data: bytes, piece: int) -> list[tuple[dict[str, object], bytes]]:
    """The messages botocore reads from `data` fed to it `piece` bytes at a time, as a socket would."""
    buffer, out = EventStreamBuffer(), []
    for start in range(0, len(data), piece):
        buffer.add_data(data[start : start + piece])
        out += [(message.headers, message.payload) for message in buffer]
    return out


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_messages_round_trip_through_botocore_across_any_split(piece: int) -> None:
    first = encode_event({":event-type": "messageStart", ":message-type": "event"}, b'{"role": "assistant"}')
    second = encode_event({":event-type": "metadata", "ünïcode": "välue"}, '{"text": "€"}'.encode())
    empty = encode_event({}, b"")

    assert decoded(first + second + empty, piece) == [
        ({":event-type": "messageStart", ":message-type": "event"}, b'{"role": "assistant"}'),
        ({":event-type": "metadata", "ünïcode": "välue"}, '{"text": "€"}'.encode()),
        ({}, b""),
    ]


@pytest.mark.parametrize("where", [5, 20, -2])  # in the prelude, the headers, the message CRC
def test_a_flipped_byte_fails_botocores_checksums(where: int) -> None:
    frame = bytearray(event("contentBlockStop", {"contentBlockIndex": 0}))
    frame[where] ^= 0x01

    with pytest.raises(ChecksumMismatch):
        decoded(bytes(frame), len(frame))


def test_a_scripted_reply_streams_as_converse_events() -> None:
    reply = BedrockReply(text="Hi!", tool_calls=[("lookup", {"city": "Oslo"})], cache_read=30, cache_write=4)

    messages = decoded(b"".join(_stream_events(reply, request=3)), 64)

    kinds = [headers[":event-type"] for headers, _ in messages]
    assert kinds == [
        "messageStart",
        *["contentBlockDelta"] * 2,
        "contentBlockStop",
        "contentBlockStart",
        *["contentBlockDelta"] * 2,
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert all(
        h[":message-type"] == "event" and h[":content-type"] == "application/json" for h, _ in messages
    )
    bodies = [json.loads(payload) for _, payload in messages]
    assert "".join(b["delta"]["text"] for b in bodies[1:3]) == "Hi!"
    assert bodies[4]["start"] == {"toolUse": {"toolUseId": "tooluse_3_0", "name": "lookup"}}
    assert json.loads("".join(b["delta"]["toolUse"]["input"] for b in bodies[5:7])) == {"city": "Oslo"}
    assert bodies[-2] == {"stopReason": "tool_use"}
    assert bodies[-1]["usage"] == {
        "inputTokens": 10,
        "outputTokens": 5,
        "totalTokens": 49,
        "cacheReadInputTokens": 30,
        "cacheWriteInputTokens": 4,
    }

"""Bedrock Converse through the real model path: real litellm, SigV4-signed HTTP, AWS's binary
event-stream framing, against a fake Bedrock Runtime on loopback (tests/fakes/bedrock_server.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import litellm
import pytest

from stepwise.core import errors
from stepwise.llm.client import complete
from stepwise_local.stack import LocalStack
from tests.fakes.bedrock_server import BedrockReply, FakeBedrock
from tests.fakes.files import png
from tests.fakes.receiver import Receiver, Reply
from tests.integration.support import tool, wait_for_run

CLAUDE = "bedrock/converse/anthropic.claude-sonnet-4-5-20250929-v1:0"
CLAUDE_PROFILE = "bedrock/us.anthropic.claude-haiku-4-5-20251001-v1:0"  # a cross-region inference profile
NOVA = "bedrock/amazon.nova-pro-v1:0"
# inference profiles named by ARN: a system-defined one names its model, an application one does not
PROFILE_ARN = (
    "bedrock/arn:aws:bedrock:eu-west-3:123456789012:inference-profile/"
    "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"
)
APP_PROFILE_ARN = (
    "bedrock/converse/arn:aws:bedrock:eu-west-3:123456789012:application-inference-profile/abc123"
)
LLAMA = "bedrock/converse/meta.llama3-3-70b-instruct-v1:0"
MISTRAL = "bedrock/converse/mistral.mistral-large-2407-v1:0"
UNKNOWN = "bedrock/converse/acme.frontier-v9:0"  # in no price map

LOOKUP: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a city up",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ZETA = {**LOOKUP, "function": {**LOOKUP["function"], "name": "zeta"}}
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
]
POINT = {"cachePoint": {"type": "default"}}


@pytest.fixture
def bedrock(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBedrock]:
    server = FakeBedrock()
    monkeypatch.setenv("AWS_BEDROCK_RUNTIME_ENDPOINT", server.url)
    # What the model step's role hands a Lambda: temporary credentials in the environment. The values
    # are the local stack's own, so a test that also runs the stack changes nothing it relies on.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    yield server
    server.close()


def points_in(blocks: list[dict[str, Any]]) -> list[bool]:
    return [set(block) == {"cachePoint"} for block in blocks]


def message_points(body: dict[str, Any]) -> int:
    return sum(sum(points_in(m["content"])) for m in body["messages"])


def without_points(value: Any) -> Any:
    """`value` without its cachePoint blocks: the moving one follows the newest message."""
    if isinstance(value, dict):
        return {k: without_points(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_points(v) for v in value if not (isinstance(v, dict) and set(v) == {"cachePoint"})]
    return value


def map_price(model: str) -> dict[str, Any]:
    return dict(litellm.model_cost[model.removeprefix("bedrock/").removeprefix("converse/")])


# --- streaming ---------------------------------------------------------------------------------------


def test_text_streams_delta_by_delta_and_an_empty_answer_is_asked_again(bedrock: FakeBedrock) -> None:
    bedrock.replies += [BedrockReply(text=""), BedrockReply(text="Sunny and mild.")]
    deltas: list[str] = []

    turn = complete(model=CLAUDE, messages=CONVERSATION[:2], tools=None, on_text=deltas.append)

    assert len(bedrock.requests) == 2  # the empty answer, then the same request again
    assert deltas == ["Sunny a", "nd mild."]  # each contentBlockDelta as it arrived
    assert (turn.text, turn.finish_reason, turn.model) == (
        "Sunny and mild.",
        "stop",
        "anthropic.claude-sonnet-4-5-20250929-v1:0",
    )
    assert turn.usage.input_tokens == 20 and turn.usage.output_tokens == 10  # both requests counted


# --- cache points ------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [CLAUDE, CLAUDE_PROFILE, PROFILE_ARN, NOVA])
def test_claude_and_nova_get_cache_points_after_the_prefix_and_on_the_newest_message(
    bedrock: FakeBedrock, model: str
) -> None:
    complete(model=model, messages=CONVERSATION, tools=[LOOKUP, ZETA])

    (sent,) = bedrock.requests
    model_id = model.removeprefix("bedrock/").removeprefix("converse/")
    assert sent.path == f"/model/{quote(model_id, safe='')}/converse-stream" and sent.model_id == model_id
    body = sent.body
    assert body["system"] == [{"text": "Be brief."}, POINT]  # the system prompt closes with a point
    tools = body["toolConfig"]["tools"]
    assert points_in(tools) == [False, False, True]  # after the last declaration: the stable prefix
    assert [t["toolSpec"]["name"] for t in tools[:2]] == ["lookup", "zeta"]
    last = body["messages"][-1]["content"]
    assert "toolResult" in last[-2] and last[-1] == POINT  # the moving boundary
    assert message_points(body) == 1  # 3 points in all, within Bedrock's 4


def test_the_prefix_is_byte_identical_across_the_calls_of_a_run(bedrock: FakeBedrock) -> None:
    bedrock.replies.append(BedrockReply(text="", tool_calls=[("lookup", {"city": "Paris"})]))
    complete(model=CLAUDE, messages=CONVERSATION[:2], tools=[LOOKUP, ZETA])
    complete(model=CLAUDE, messages=CONVERSATION, tools=[LOOKUP, ZETA])

    first, second = bedrock.bodies
    assert json.dumps(first["system"]) == json.dumps(second["system"])
    assert json.dumps(first["toolConfig"]) == json.dumps(second["toolConfig"])
    assert first["messages"][0]["content"][-1] == POINT  # the first call's boundary, moved on since
    assert without_points(first["messages"]) == without_points(second["messages"][:1])
    assert message_points(second) == 1


@pytest.mark.parametrize("model", [LLAMA, MISTRAL, APP_PROFILE_ARN, UNKNOWN])
def test_models_that_do_not_cache_on_request_get_no_cache_points(bedrock: FakeBedrock, model: str) -> None:
    bedrock.replies.append(BedrockReply(text="", tool_calls=[("lookup", {"city": "Oslo"})]))
    tools = None if model == UNKNOWN else [LOOKUP]  # litellm refuses tools for a model it cannot place

    turn = complete(model=model, messages=CONVERSATION, tools=tools)

    (sent,) = bedrock.requests
    assert "cachePoint" not in json.dumps(sent.body)
    assert sent.body["system"] == [{"text": "Be brief."}]
    # litellm streams Llama's tool calls as one /converse answer replayed as a stream; either way the
    # turn arrives whole
    assert sent.path.endswith("/converse" if model == LLAMA else "/converse-stream")
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("lookup", {"city": "Oslo"})]


# --- usage and cost ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [CLAUDE, NOVA])
def test_cache_reads_and_writes_are_counted_and_priced_from_the_map(bedrock: FakeBedrock, model: str) -> None:
    bedrock.replies.append(BedrockReply(input_tokens=7, cache_read=1000, cache_write=200, output_tokens=5))

    usage = complete(model=model, messages=CONVERSATION, tools=[LOOKUP]).usage

    assert (usage.input_tokens, usage.cached_tokens, usage.cache_write_tokens, usage.output_tokens) == (
        1207,  # the whole prompt: uncached, read and written
        1000,
        200,
        5,
    )
    # litellm's own price for the same usage, built without the stream
    same = litellm.Usage(
        prompt_tokens=1207,
        completion_tokens=5,
        total_tokens=1212,
        prompt_tokens_details={"cached_tokens": 1000, "cache_creation_tokens": 200},
        cache_read_input_tokens=1000,
        cache_creation_input_tokens=200,
    )
    assert usage.cost_usd == pytest.approx(
        litellm.completion_cost(completion_response=litellm.ModelResponse(usage=same), model=model)
    )
    price = map_price(model)
    full = 1207 * price["input_cost_per_token"] + 5 * price["output_cost_per_token"]
    assert (
        usage.cost_usd is not None and 0 < usage.cost_usd < full
    )  # cached tokens are neither full price nor free
    if model == CLAUDE:  # written by hand from the map: reads at a tenth, writes at 1.25x
        assert usage.cost_usd == pytest.approx(
            7 * price["input_cost_per_token"]
            + 1000 * price["cache_read_input_token_cost"]
            + 200 * price["cache_creation_input_token_cost"]
            + 5 * price["output_cost_per_token"]
        )


@pytest.mark.parametrize("model", [UNKNOWN, APP_PROFILE_ARN])  # an application profile hides its model
def test_an_unknown_bedrock_model_costs_null_with_its_tokens_counted(
    bedrock: FakeBedrock, model: str
) -> None:
    bedrock.replies.append(BedrockReply(input_tokens=40, output_tokens=6))

    usage = complete(model=model, messages=CONVERSATION[:2], tools=None).usage

    assert (usage.input_tokens, usage.output_tokens, usage.cost_usd) == (40, 6, None)


# --- the Lambda environment and errors ---------------------------------------------------------------


def test_requests_are_signed_for_the_functions_region_with_its_session_token(
    bedrock: FakeBedrock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Lambda sets AWS_REGION (and no AWS_REGION_NAME, litellm's own variable): Bedrock is asked in the
    # region the model step runs in, not in boto's default one.
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_REGION_NAME", raising=False)

    complete(model=CLAUDE, messages=CONVERSATION[:2], tools=None)

    headers = bedrock.requests[0].headers
    assert headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/")
    assert "/eu-west-3/bedrock/aws4_request" in headers["authorization"]
    assert headers["x-amz-security-token"] == "testing"


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (BedrockReply(status=429, error="ThrottlingException"), errors.RateLimited),
        (
            BedrockReply(status=503, error="ServiceUnavailableException", message="busy"),
            errors.ProviderUnavailable,
        ),
        (
            BedrockReply(
                status=400, error="ValidationException", message="Input is too long for requested model."
            ),
            errors.ContextTooLong,
        ),
        (
            BedrockReply(status=400, error="ValidationException", message="Malformed input request"),
            errors.ModelError,
        ),
        (BedrockReply(stream_exception="throttlingException"), errors.RateLimited),  # after HTTP 200
        (BedrockReply(stream_exception="internalServerException"), errors.ProviderUnavailable),
    ],
)
def test_bedrock_errors_are_classified_for_the_state_machine(
    bedrock: FakeBedrock, reply: BedrockReply, error: type[Exception]
) -> None:
    bedrock.replies.append(reply)

    with pytest.raises(error) as raised:
        complete(model=CLAUDE, messages=CONVERSATION[:2], tools=None)

    assert type(raised.value) is error  # RateLimited and the others are ModelErrors too: exactly this one


def test_an_answer_cut_at_max_tokens_is_continued_and_stitched(bedrock: FakeBedrock) -> None:
    bedrock.replies += [
        BedrockReply(text="The first half, ", stop_reason="max_tokens"),
        BedrockReply(text="and the second."),
    ]

    turn = complete(model=CLAUDE, messages=CONVERSATION[:2], tools=None)

    assert (turn.text, turn.continuations) == ("The first half, and the second.", 1)
    assert bedrock.bodies[1]["messages"][-2]["content"][0] == {"text": "The first half, "}


# --- a run through the stack -------------------------------------------------------------------------


def test_a_run_on_bedrock_calls_a_tool_and_reports_cached_usage_and_cost(
    stack: LocalStack, bedrock: FakeBedrock, receiver: Receiver
) -> None:
    receiver.replies["/lookup"] = Reply(body={"city": "Oslo", "sky": "clear"})
    bedrock.replies += [
        BedrockReply(
            text="Checking.", tool_calls=[("lookup", {"q": "Oslo"})], input_tokens=12, cache_write=900
        ),
        BedrockReply(
            text="Clear skies in Oslo.", input_tokens=30, cache_read=900, cache_write=60, output_tokens=8
        ),
    ]
    _, _, agent = stack.invoke_api(
        "POST",
        "/v1/agents",
        {
            "name": "on-bedrock",
            "model": CLAUDE,
            "system_prompt": "Be exact.",
            "tools": [tool("lookup", f"{receiver.url}/lookup")],
        },
    )
    # weighing the agent counts its first call offline: no request reaches Bedrock
    status, _, weight = stack.invoke_api("GET", f"/v1/agents/{agent['agent_id']}/weight")
    assert status == 200 and weight["model"] == CLAUDE, weight
    assert sorted(t["name"] for t in weight["tools"]) == ["lookup", "result_read"]
    assert weight["first_call_tokens"] == weight["system_tokens"] + weight["tools_tokens"] > 0
    assert bedrock.requests == []
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "Oslo?"})
    run = wait_for_run(stack, accepted["run_id"])

    assert run["status"] == "succeeded" and run["output"] == "Clear skies in Oslo.", run
    assert [r.json() for r in receiver.to("/lookup")] == [{"q": "Oslo"}]
    first, second = bedrock.bodies
    # the second call answers the first's toolUse with a toolResult carrying the tool's answer
    call, result = second["messages"][-2]["content"], second["messages"][-1]["content"]
    uses = [b["toolUse"] for b in call if "toolUse" in b]
    assert [(u["toolUseId"], u["name"], u["input"]) for u in uses] == [
        ("tooluse_1_0", "lookup", {"q": "Oslo"})
    ]
    (answered,) = [b["toolResult"] for b in result if "toolResult" in b]
    assert answered["toolUseId"] == "tooluse_1_0" and "clear" in json.dumps(answered["content"])
    assert result[-1] == POINT and message_points(second) == 1
    # the stable prefix is the same bytes on both calls, marked at its end
    assert json.dumps(first["system"]) == json.dumps(second["system"]) and first["system"][-1] == POINT
    assert json.dumps(first["toolConfig"]) == json.dumps(second["toolConfig"])

    price = map_price(CLAUDE)
    cost = (
        42 * price["input_cost_per_token"]
        + 900 * price["cache_read_input_token_cost"]
        + 960 * price["cache_creation_input_token_cost"]
        + 13 * price["output_cost_per_token"]
    )
    usage = run["usage"]
    assert {k: v for k, v in usage.items() if k != "cost_usd"} == {
        "input_tokens": 12 + 900 + 30 + 900 + 60,
        "output_tokens": 13,
        "cached_tokens": 900,
        "cache_write_tokens": 960,
    }
    assert usage["cost_usd"] == pytest.approx(cost)


def user_blocks(body: dict[str, Any], index: int = -1) -> list[dict[str, Any]]:
    """A user message's Converse content blocks, without cache points."""
    users = [m for m in body["messages"] if m["role"] == "user"]
    return [b for b in users[index]["content"] if "cachePoint" not in b]


def test_an_image_reaches_a_bedrock_vision_model_as_an_image_block_and_later_turns_get_a_note(
    stack: LocalStack, bedrock: FakeBedrock
) -> None:
    image = png(8, 8)
    bedrock.replies += [BedrockReply(text="a red square"), BedrockReply(text="still red")]
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "sees", "model": CLAUDE})
    runs = f"/v1/agents/{agent['agent_id']}/runs"
    attachment = {"name": "square.png", "content_type": "image/png", "data": base64.b64encode(image).decode()}

    # When a run carries an image, and the session's next run does not
    _, _, first = stack.invoke_api("POST", runs, {"message": "look", "attachments": [attachment]})
    assert wait_for_run(stack, first["run_id"])["status"] == "succeeded"
    _, _, second = stack.invoke_api("POST", runs, {"message": "and now?", "session_id": first["session_id"]})
    assert wait_for_run(stack, second["run_id"])["status"] == "succeeded"

    # Then the first call carries it as a Converse image block: its format and its bytes (base64 in JSON)
    shown, later = bedrock.bodies
    blocks = user_blocks(shown)
    assert blocks[0] == {"text": "look"}
    [picture] = [b["image"] for b in blocks if "image" in b]
    assert picture == {"format": "png", "source": {"bytes": base64.b64encode(image).decode()}}
    # And the next turn: the image is a note, the model's answer about it stays
    earlier = user_blocks(later, 0)
    assert not [b for b in earlier if "image" in b]
    assert "shown in an earlier turn, not sent again" in " ".join(b.get("text", "") for b in earlier)
    answers = [m["content"] for m in later["messages"] if m["role"] == "assistant"]
    assert [b for b in answers[0] if "cachePoint" not in b] == [{"text": "a red square"}]

"""Attachments end to end on the local stack: uploads through presigned PUTs to its loopback S3, files
copied under the run and hashed, what the model is shown of them (an OpenAI-compatible fake records
every request), `attachment_read`, deletion and replay, MCP images."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest

from stepwise_local.stack import LocalStack
from tests.eventually import eventually
from tests.fakes.files import pdf, png
from tests.fakes.mcp_server import FakeMcpServer
from tests.fakes.openai_server import FakeOpenAI, Reply
from tests.integration.support import OTHER_KEY, wait_for_run

VISION = "openai/gpt-4o"  # litellm knows it sees images
BLIND = "openai/gpt-fake"  # unknown to litellm: no vision
ATTACHMENT = re.compile(r"att_[0-9A-HJKMNP-TV-Z]{26}")


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield fake
    fake.close()


def agent(stack: LocalStack, model: str = "scripted", key: str | None = None, **extra: Any) -> str:
    kwargs = {"key": key} if key else {}
    status, _, body = stack.invoke_api(
        "POST", "/v1/agents", {"name": "files", "model": model, **extra}, **kwargs
    )
    assert status == 201, body
    return str(body["agent_id"])


def inline(name: str, content_type: str, data: bytes) -> dict[str, str]:
    return {"name": name, "content_type": content_type, "data": base64.b64encode(data).decode()}


def start(stack: LocalStack, agent_id: str, **body: Any) -> tuple[int, Any]:
    status, _, answer = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "look", **body})
    return status, answer


def upload(stack: LocalStack, name: str, content_type: str, data: bytes, key: str | None = None) -> str:
    kwargs = {"key": key} if key else {}
    body = {"name": name, "content_type": content_type, "size": len(data)}
    status, _, ticket = stack.invoke_api("POST", "/v1/uploads", body, **kwargs)
    assert status == 201, ticket
    assert ticket["method"] == "PUT"
    put = httpx.put(ticket["url"], headers=ticket["headers"], content=data)
    assert put.status_code == 200, put.text
    return str(ticket["upload_id"])


def stored(stack: LocalStack, key: str) -> bytes:
    bucket = stack.resolver.physical["StorageBucket"]
    return bytes(boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read())


def keys_under(stack: LocalStack, prefix: str) -> list[str]:
    bucket = stack.resolver.physical["StorageBucket"]
    versions = boto3.client("s3").list_object_versions(Bucket=bucket, Prefix=prefix)
    return [v["Key"] for v in versions.get("Versions", []) + versions.get("DeleteMarkers", [])]


def user_parts(request: dict[str, Any], index: int = -1) -> list[dict[str, Any]]:
    users = [m for m in request["messages"] if m["role"] == "user"]
    content = users[index]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def texts(parts: list[dict[str, Any]]) -> str:
    return "\n".join(p["text"] for p in parts if p["type"] == "text")


# --- Uploads -------------------------------------------------------------------------------------


def test_an_upload_is_put_presigned_then_copied_under_the_run_hashed(stack: LocalStack) -> None:
    image = png(4, 4)
    upload_id = upload(stack, "receipt.png", "image/png", image)

    status, accepted = start(stack, agent(stack), attachments=[{"upload_id": upload_id}])

    assert status == 202, accepted
    run = wait_for_run(stack, accepted["run_id"])
    assert run["status"] == "succeeded", run
    [listed] = run["attachments"]
    assert listed == accepted["attachments"][0]
    assert listed["name"] == "receipt.png" and listed["content_type"] == "image/png"
    assert listed["size"] == len(image) and listed["sha256"] == hashlib.sha256(image).hexdigest()
    key = f"tenants/local/runs/{run['run_id']}/attachments/{listed['attachment_id']}"
    assert stored(stack, key) == image
    bucket = stack.resolver.physical["StorageBucket"]
    tags = boto3.client("s3").get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
    assert tags == [{"Key": "stepwise-retention", "Value": "run"}]  # what the lifecycle rule selects


def test_an_upload_is_used_once_and_gone_once_a_run_has_copied_it(stack: LocalStack) -> None:
    # Review finding 6: erasing a run's files left its upload readable for a day, and nameable again.
    upload_id = upload(stack, "notes.txt", "text/plain", b"private notes\n")
    agent_id = agent(stack)

    status, accepted = start(stack, agent_id, attachments=[{"upload_id": upload_id}])

    assert status == 202, accepted
    assert keys_under(stack, f"tenants/local/uploads/{upload_id}") == []
    status, again = start(stack, agent_id, attachments=[{"upload_id": upload_id}])
    assert status == 422 and again["error"]["code"] == "upload_not_found", again
    wait_for_run(stack, accepted["run_id"])


def test_a_put_other_than_the_signed_one_is_refused(stack: LocalStack) -> None:
    body = {"name": "a.png", "content_type": "image/png", "size": 70}
    _, _, ticket = stack.invoke_api("POST", "/v1/uploads", body)

    longer = httpx.put(
        ticket["url"], headers={**ticket["headers"], "Content-Length": "71"}, content=b"x" * 71
    )
    retyped = httpx.put(
        ticket["url"], headers={**ticket["headers"], "Content-Type": "text/plain"}, content=b"x" * 70
    )

    assert longer.status_code == retyped.status_code == 403
    assert "SignatureDoesNotMatch" in longer.text and "SignatureDoesNotMatch" in retyped.text


def test_an_upload_over_50_mb_is_refused_before_any_url(stack: LocalStack) -> None:
    body = {"name": "big.csv", "content_type": "text/csv", "size": 50 * 1024 * 1024 + 1}
    status, _, answer = stack.invoke_api("POST", "/v1/uploads", body)
    assert status == 422 and answer["error"]["code"] == "validation_error"


def test_another_tenants_upload_names_nothing(stack: LocalStack) -> None:
    theirs = upload(stack, "theirs.csv", "text/csv", b"a,b\n1,2\n", key=OTHER_KEY)

    status, answer = start(stack, agent(stack), attachments=[{"upload_id": theirs}])

    assert status == 422 and answer["error"]["code"] == "upload_not_found"


# --- Content types -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "declared", "data", "code"),
    [
        ("photo.png", "image/png", b"name,total\nann,3\n", "content_type_mismatch"),  # text claiming PNG
        ("data.csv", "text/csv", png(), "content_type_mismatch"),  # a PNG claiming CSV
        ("doc.pdf", "application/pdf", png(), "content_type_mismatch"),
        ("data.json", "application/json", b"name,total\n", "content_type_mismatch"),
        (
            "tool.exe",
            "application/octet-stream",
            b"MZ\x90\x00" + b"\x00\xff" * 64,
            "unsupported_content_type",
        ),
    ],
)
def test_a_file_is_what_its_bytes_say_not_what_it_claims(
    stack: LocalStack, name: str, declared: str, data: bytes, code: str
) -> None:
    agent_id = agent(stack)
    _, _, before = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")

    status, answer = start(stack, agent_id, attachments=[inline(name, declared, data)])

    assert status == 422 and answer["error"]["code"] == code, answer
    _, _, after = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}")
    assert after["runs"] == before["runs"] == []  # nothing was recorded


def test_an_uploaded_file_that_lies_is_refused_and_its_copies_undone(stack: LocalStack) -> None:
    honest = upload(stack, "fine.png", "image/png", png())
    liar = upload(stack, "photo.png", "image/png", b"just text\n")

    status, answer = start(stack, agent(stack), attachments=[{"upload_id": honest}, {"upload_id": liar}])

    assert status == 422 and answer["error"]["code"] == "content_type_mismatch"
    assert answer["error"]["details"] == {
        "name": "photo.png",
        "declared": "image/png",
        "detected": "text/plain",
    }
    assert [k for k in keys_under(stack, "tenants/local/runs/") if "/attachments/" in k and honest in k] == []


def test_an_octet_stream_claim_takes_the_sniffed_type(stack: LocalStack) -> None:
    status, answer = start(
        stack, agent(stack), attachments=[inline("scan", "application/octet-stream", pdf("x"))]
    )
    assert status == 202, answer
    assert answer["attachments"][0]["content_type"] == "application/pdf"


# --- Size -----------------------------------------------------------------------------------------------


def test_inline_files_over_5_mib_are_413_with_a_hint_to_upload(stack: LocalStack) -> None:
    big = b"a,b\n" + b"1,2\n" * (1024 * 1024)  # 4 MiB of CSV: 5.3 MiB of base64

    status, answer = start(stack, agent(stack), attachments=[inline("big.csv", "text/csv", big)])

    assert status == 413 and answer["error"]["code"] == "attachments_too_large"
    assert "POST /v1/uploads" in answer["error"]["message"]


def test_a_run_body_over_the_lambda_limit_is_413_with_a_hint(stack: LocalStack) -> None:
    raw = b'{"message": "look", "metadata": {"pad": "' + b"x" * 6_100_000 + b'"}}'
    status, _, answer = stack.invoke_api("POST", f"/v1/agents/{agent(stack)}/runs", raw=raw)
    assert status == 413 and "POST /v1/uploads" in answer["error"]["message"]


# --- What the model sees ----------------------------------------------------------------------------


def test_an_image_reaches_a_vision_model_as_an_image_part_and_later_turns_get_a_note(
    stack: LocalStack, model: FakeOpenAI
) -> None:
    image = png(8, 8)
    agent_id = agent(stack, VISION)
    model.text("a red square")
    model.text("still red")

    _, first = start(stack, agent_id, attachments=[inline("square.png", "image/png", image)])
    assert wait_for_run(stack, first["run_id"])["status"] == "succeeded"
    _, second = start(stack, agent_id, message="and now?", session_id=first["session_id"])
    assert wait_for_run(stack, second["run_id"])["status"] == "succeeded"

    shown, later = model.bodies
    parts = user_parts(shown)
    assert parts[0] == {"type": "text", "text": "look"}
    [picture] = [p for p in parts if p["type"] == "image_url"]
    assert picture["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(image).decode()
    # The next turn: the image is a note, the model's answer about it stays.
    earlier = user_parts(later, 0)
    assert not [p for p in earlier if p["type"] == "image_url"]
    assert "shown in an earlier turn, not sent again" in texts(earlier)
    assert {"role": "assistant", "content": "a red square"} in later["messages"]
    assert "stepwise" not in str([list(m) for m in later["messages"]])  # our own key never leaves


def test_a_model_without_vision_gets_a_description(stack: LocalStack, model: FakeOpenAI) -> None:
    model.text("I cannot see it")
    _, run = start(stack, agent(stack, BLIND), attachments=[inline("square.png", "image/png", png())])
    wait_for_run(stack, run["run_id"])

    parts = user_parts(model.bodies[0])
    assert [p["type"] for p in parts] == ["text", "text"]
    assert "this model cannot see images" in parts[1]["text"] and "square.png" in parts[1]["text"]


def test_a_pdf_is_shown_as_its_text(stack: LocalStack, model: FakeOpenAI) -> None:
    model.text("42.50")
    _, run = start(
        stack,
        agent(stack, BLIND),
        attachments=[inline("invoice.pdf", "application/pdf", pdf("Invoice total 42.50"))],
    )
    wait_for_run(stack, run["run_id"])

    shown = texts(user_parts(model.bodies[0]))
    assert "invoice.pdf (application/pdf" in shown
    assert "--- page 1 ---\nInvoice total 42.50" in shown


def test_a_small_csv_is_inline_and_offers_attachment_read(stack: LocalStack, model: FakeOpenAI) -> None:
    model.text("3 rows")
    _, run = start(
        stack, agent(stack, BLIND), attachments=[inline("t.csv", "text/csv", b"name,total\nann,3\nbo,4\n")]
    )
    wait_for_run(stack, run["run_id"])

    request = model.bodies[0]
    assert "name,total\nann,3\nbo,4" in texts(user_parts(request))
    assert [t["function"]["name"] for t in request["tools"]] == ["attachment_read"]


def test_a_large_csv_is_described_then_read_with_attachment_read(
    stack: LocalStack, model: FakeOpenAI
) -> None:
    rows = "".join(f"{i},item{i},{i * 3}\n" for i in range(3000))
    data = ("id,name,price\n" + rows).encode()

    def read_more(request: dict[str, Any]) -> Reply:
        [attachment_id] = set(ATTACHMENT.findall(texts(user_parts(request))))
        arguments = {"attachment_id": attachment_id, "offset": 2500, "limit": 3}
        return Reply(calls=[("attachment_read", arguments)], finish_reason="tool_calls")

    model.answer(read_more)
    model.text("row 2500 costs 7500")
    _, run = start(stack, agent(stack, BLIND), attachments=[inline("items.csv", "text/csv", data)])
    done = wait_for_run(stack, run["run_id"])

    assert done["status"] == "succeeded" and done["tools_executed"] == ["attachment_read"]
    described, after = model.bodies
    shown = texts(user_parts(described))
    assert "A CSV of 3000 rows and 3 columns: id, name, price." in shown
    assert "19,item19,57" in shown and "20,item20,60" not in shown  # the first 20 rows only
    [result] = [m for m in after["messages"] if m["role"] == "tool"]
    assert (
        '"rows": [["2500", "item2500", "7500"], ["2501", "item2501", "7503"], ["2502", "item2502", "7506"]]'
        in (result["content"])
    )
    assert '"row_count": 3000' in result["content"] and '"next_offset": 2503' in result["content"]


# --- Replay and deletion -----------------------------------------------------------------------------


def test_a_replay_copies_the_files_and_deleting_them_makes_replay_410(stack: LocalStack) -> None:
    data = b"name,total\nann,3\n"
    _, accepted = start(stack, agent(stack), attachments=[inline("t.csv", "text/csv", data)])
    original = wait_for_run(stack, accepted["run_id"])
    [attachment] = original["attachments"]

    status, _, replayed = stack.invoke_api("POST", f"/v1/runs/{original['run_id']}/replay?force=true")
    assert status == 201, replayed
    assert replayed["attachments"] == original["attachments"]
    copy = f"tenants/local/runs/{replayed['run_id']}/attachments/{attachment['attachment_id']}"
    assert stored(stack, copy) == data
    wait_for_run(stack, replayed["run_id"])

    assert stack.invoke_api("DELETE", f"/v1/runs/{original['run_id']}/attachments", key=OTHER_KEY)[0] == 404
    status, _, _ = stack.invoke_api("DELETE", f"/v1/runs/{original['run_id']}/attachments")
    assert status == 204

    _, _, erased = stack.invoke_api("GET", f"/v1/runs/{original['run_id']}")
    assert erased["attachments"] == [] and erased["attachments_erased_at"] is not None
    assert keys_under(stack, f"tenants/local/runs/{original['run_id']}/") == []  # every version
    assert keys_under(stack, f"tenants/local/runs/{replayed['run_id']}/") != []  # the replay's own stay
    status, _, refused = stack.invoke_api("POST", f"/v1/runs/{original['run_id']}/replay?force=true")
    assert status == 410 and refused["error"]["code"] == "input_gone"


def test_deleting_an_active_runs_files_is_409(stack: LocalStack) -> None:
    agent_id = agent(
        stack,
        "scripted",
        tools=[
            {
                "type": "client",
                "name": "ask",
                "description": "ask",
                "input_schema": {"type": "object", "properties": {}},
            }
        ],
    )
    _, accepted = start(stack, agent_id, attachments=[inline("t.txt", "text/plain", b"hello")])

    def settled() -> dict[str, Any]:
        _, _, run = stack.invoke_api("GET", f"/v1/runs/{accepted['run_id']}")
        assert run["status"] not in ("queued", "running"), run
        return dict(run)

    run = eventually(settled, timeout=30, what="the run to pause")
    assert run["status"] == "waiting"  # on the client tool

    status, _, answer = stack.invoke_api("DELETE", f"/v1/runs/{accepted['run_id']}/attachments")

    assert status == 409 and answer["error"]["code"] == "run_active"
    stack.invoke_api("POST", f"/v1/runs/{accepted['run_id']}/cancel")


# --- MCP images ---------------------------------------------------------------------------------------


def test_an_image_from_an_mcp_tool_reaches_the_model_as_an_image(
    stack: LocalStack, model: FakeOpenAI
) -> None:
    picture = png(3, 3)
    server = FakeMcpServer(image=picture)
    try:
        agent_id = agent(stack, VISION)
        status, _, registered = stack.invoke_api(
            "POST",
            f"/v1/agents/{agent_id}/mcp-servers",
            {"name": "cam", "url": server.url, "permission": "allow"},
        )
        assert status == 201, registered
        model.tool_calls([("mcp__cam__snapshot", {})])
        model.text("a tiny red picture")
        _, run = start(stack, agent_id)
        assert wait_for_run(stack, run["run_id"])["status"] == "succeeded"
    finally:
        server.close()

    after = model.bodies[1]["messages"]
    [result] = [m for m in after if m["role"] == "tool"]
    assert "the catalogue, photographed" in result["content"] and "shown to you" in result["content"]
    carrier = after[after.index(result) + 1]
    assert carrier["role"] == "user"
    [image] = [p for p in carrier["content"] if p["type"] == "image_url"]
    assert image["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(picture).decode()


def test_deleted_files_leave_later_prompts_names_and_all(stack: LocalStack, model: FakeOpenAI) -> None:
    agent_id = agent(stack, BLIND)
    model.text("noted")
    _, first = start(stack, agent_id, attachments=[inline("jane-doe-passport.txt", "text/plain", b"secret")])
    wait_for_run(stack, first["run_id"])
    [attachment_id] = [a["attachment_id"] for a in first["attachments"]]
    assert stack.invoke_api("DELETE", f"/v1/runs/{first['run_id']}/attachments")[0] == 204

    def read_it(request: dict[str, Any]) -> Reply:
        return Reply(
            calls=[("attachment_read", {"attachment_id": attachment_id})], finish_reason="tool_calls"
        )

    model.answer(read_it)
    model.text("it is gone")
    _, second = start(stack, agent_id, message="read it again", session_id=first["session_id"])
    wait_for_run(stack, second["run_id"])

    later, after = model.bodies[1:]
    earlier = texts(user_parts(later, 0))
    assert f"[attachment {attachment_id}: deleted]" in earlier and "jane-doe" not in str(later)
    [result] = [m for m in after["messages"] if m["role"] == "tool"]
    assert '"code": "not_found"' in result["content"] and "secret" not in str(after)

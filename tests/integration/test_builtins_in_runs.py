"""Builtin tools inside real runs: the registry injects scope and settings, never the model."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stepwise_local.stack import LocalStack
from tests.integration.support import OTHER_KEY, wait_for_run


def run_script(
    stack: LocalStack, tools: list[dict[str, Any]], script: list[dict[str, Any]], key: str | None = None
) -> dict[str, Any]:
    kwargs = {"key": key} if key else {}
    status, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "builtins", "tools": tools}, **kwargs)
    assert status == 201, agent
    _, _, accepted = stack.invoke_api(
        "POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "go", "script": script}, **kwargs
    )
    return wait_for_run(stack, accepted["run_id"], key=key)


def results(stack: LocalStack, run_id: str, key: str | None = None) -> list[dict[str, Any]]:
    kwargs = {"key": key} if key else {}
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run_id}/events?after=0&wait=2", **kwargs)
    return [e["data"] for e in page["events"] if e["type"] == "tool_result"]


def test_storage_is_scoped_to_the_tenant(stack: LocalStack) -> None:
    tools = [{"name": "storage_write"}, {"name": "storage_read"}]
    write = {
        "tool_calls": [
            {"name": "storage_write", "arguments": {"path": "notes/today.txt", "content": "hello"}}
        ]
    }
    read = {
        "tool_calls": [
            {"name": "storage_read", "arguments": {"operation": "download", "path": "notes/today.txt"}}
        ]
    }

    mine = run_script(stack, tools, [write, read, {"text": "done"}])
    theirs = run_script(stack, tools, [read, {"text": "done"}], key=OTHER_KEY)

    assert mine["status"] == "succeeded" and mine["tools_executed"] == ["storage_write", "storage_read"]
    wrote, downloaded = results(stack, mine["run_id"])
    assert wrote["output"]["size"] == 5 and "hello" in json.dumps(downloaded["output"])
    (other,) = results(stack, theirs["run_id"], key=OTHER_KEY)
    assert other["error"]["code"] == "not_found"  # the other tenant's prefix holds no such file


def test_an_unknown_builtin_is_refused_at_creation(stack: LocalStack) -> None:
    status, _, body = stack.invoke_api(
        "POST", "/v1/agents", {"name": "x", "tools": [{"name": "rm_everything"}]}
    )
    assert status == 422 and "web_search" in json.dumps(body)


@pytest.fixture
def exa(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "key": self.headers.get("x-api-key"), "body": body})
            reply = json.dumps(
                {"results": [{"title": "Stepwise", "url": "https://example.com", "highlights": ["found it"]}]}
            )
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply.encode())

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("EXA_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}")
    yield seen
    server.shutdown()


def test_web_search_reads_the_tenants_key_from_settings(stack: LocalStack, exa: list[dict[str, Any]]) -> None:
    from stepwise.settings.accessor import invalidate

    # Other tests of this stack may have set the key: start from none.
    assert stack.invoke_api("DELETE", "/v1/settings/EXA_API_KEY")[0] in (204, 404)
    invalidate("local")
    search = {"tool_calls": [{"name": "web_search", "arguments": {"query": "agent runtimes"}}]}
    missing = run_script(stack, [{"name": "web_search"}], [search, {"text": "done"}])
    (without_key,) = results(stack, missing["run_id"])
    assert (
        without_key["error"]["code"] == "not_configured" and "EXA_API_KEY" in without_key["error"]["message"]
    )

    assert stack.invoke_api("PUT", "/v1/settings/EXA_API_KEY", {"value": "exa-secret"})[0] == 200
    invalidate("local")
    found = run_script(stack, [{"name": "web_search"}], [search, {"text": "done"}])

    (with_key,) = results(stack, found["run_id"])
    assert "found" in json.dumps(with_key["output"])
    assert exa[-1]["key"] == "exa-secret" and exa[-1]["body"]["query"] == "agent runtimes"
    assert "exa-secret" not in json.dumps(results(stack, found["run_id"]))

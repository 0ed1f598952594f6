"""A human approves from the link in headless Chromium (Debian's package), as from a phone."""

from __future__ import annotations

from typing import Any

import httpx
from playwright.sync_api import Browser

from tests.eventually import eventually
from tests.fakes.receiver import Receiver


def test_clicking_approve_on_the_link_page_runs_the_tool(
    api: httpx.Client, receiver: Receiver, browser: Browser
) -> None:
    tool = {
        "type": "http",
        "name": "send_email",
        "description": "Send an email",
        "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
        "endpoint": f"{receiver.url}/send",
        "permission": "ask",
    }
    agent = api.post("/v1/agents", json={"name": "mailer", "tools": [tool]}).json()
    script = [
        {"tool_calls": [{"name": "send_email", "arguments": {"to": "ceo@example.com"}}]},
        {"text": "sent"},
    ]
    run = api.post(
        f"/v1/agents/{agent['agent_id']}/runs", json={"message": "mail the ceo", "script": script}
    ).json()

    def approval_url() -> str | None:
        page = api.get(f"/v1/runs/{run['run_id']}/events", params={"wait": 2}).json()
        found = [e["data"]["approval_url"] for e in page["events"] if e["type"] == "approval_requested"]
        return found[0] if found else None

    url = eventually(approval_url, interval=0.1, what="the approval link")
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True)  # a phone
    page.goto(url)
    assert (
        "mailer" in page.content() and "send_email" in page.content() and "ceo@example.com" in page.content()
    )
    assert receiver.to("/send") == []  # looking decides nothing

    page.get_by_role("button", name="Approve").click()
    page.wait_for_load_state()

    assert "approved" in page.locator("h1").inner_text().lower()

    def succeeded() -> dict[str, Any] | None:
        current: dict[str, Any] = api.get(f"/v1/runs/{run['run_id']}").json()
        return current if current["status"] == "succeeded" else None

    final = eventually(succeeded, interval=0.1, what="the run to succeed")
    assert final["output"] == "sent"
    assert [r.json() for r in receiver.to("/send")] == [{"to": "ceo@example.com"}]

    page.reload()  # the link is single use
    assert "already decided" in page.content().lower()
    page.close()

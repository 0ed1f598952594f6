"""A person authorizes an MCP server behind OAuth in headless Chromium: Stepwise's start link sets the
flow's cookie, the authorization server (on another site) approves and redirects back, and the browser
sends the cookie to the callback on that cross-site redirect (SameSite=Lax), which completes and clears
it. The same link opened in a second browser is refused and cannot complete the flow."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlparse

import httpx
import pytest
from playwright.sync_api import Browser

from tests.fakes.oauth_server import FakeOAuthMcpServer


@pytest.fixture
def fake() -> Iterator[FakeOAuthMcpServer]:
    server = FakeOAuthMcpServer()
    server.authorize_origin = f"http://localhost:{server.port}"  # another site than the API's 127.0.0.1
    yield server
    server.close()


def test_a_person_authorizes_in_their_browser_and_only_there(
    api: httpx.Client, browser: Browser, fake: FakeOAuthMcpServer
) -> None:
    agent = api.post("/v1/agents", json={"name": "oauth-browser"}).json()
    body = {"name": "linear", "url": fake.url, "auth": {"type": "oauth"}}
    server = api.post(f"/v1/agents/{agent['agent_id']}/mcp-servers", json=body).json()
    link = server["authorization_url"]
    assert urlparse(link).path == "/v1/integrations/mcp/oauth/start", server

    # A person opens the link: on to the authorization server, which approves and sends them back
    person = browser.new_context()
    cookies_on_the_way: list[dict[str, object]] = []
    page = person.new_page()
    page.on(
        "request", lambda r: cookies_on_the_way.extend(person.cookies()) if "/authorize" in r.url else None
    )
    page.goto(link)

    # The cookie was set HttpOnly, SameSite=Lax, for the MCP OAuth path only
    (cookie,) = [c for c in cookies_on_the_way if str(c["name"]).startswith("stepwise_oauth_")]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Lax"
    assert cookie["path"] == "/v1/integrations/mcp/oauth"
    # and the browser sent it on the cross-site redirect back: connected, and the cookie cleared
    assert "Connected" in page.locator("h1").inner_text(), page.content()
    assert [r["redirect_uri"] for r in fake.authorize_requests][-1].startswith("http://127.0.0.1:")
    assert not [c for c in person.cookies() if str(c["name"]).startswith("stepwise_oauth_")]
    shown = api.get(f"/v1/agents/{agent['agent_id']}/mcp-servers/linear").json()
    assert shown["status"] == "ready", shown

    # The same link in another browser: gone, and it sends nobody to the authorization server
    someone = browser.new_context()
    other = someone.new_page()
    response = other.goto(link)
    assert response is not None and response.status == 410
    assert "oauth_flow_opened" in other.content() and not someone.cookies()
    assert len(fake.authorize_requests) == 1
    person.close()
    someone.close()

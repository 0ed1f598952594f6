"""MCP servers behind OAuth on the local stack, against an MCP server and its authorization server on
loopback (tests.fakes.oauth_server): registration answers an authorization URL, the public callback
stores the tokens encrypted, calls refresh them before expiry, a revoked grant turns the server into
`needs_authorization`, and a state works once, for the server it was issued for, in the browser that
opened its start link (tests.integration.oauth_browser plays the person).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import boto3
import pytest

from stepwise import mcp
from stepwise.agents import mcp_servers as servers
from stepwise.agents import mcp_store as store
from stepwise.agents import store as agents
from stepwise.core import config
from stepwise_local.stack import DEFAULT_TENANT, LocalStack
from tests.fakes.mcp_server import FakeMcpServer
from tests.fakes.oauth_server import SCOPES, FakeOAuthMcpServer
from tests.integration.oauth_browser import Browser, parsed_cookie, query_of
from tests.integration.support import OTHER_KEY

CALLBACK = "/v1/integrations/mcp/oauth/callback"
START = "/v1/integrations/mcp/oauth/start"


@pytest.fixture
def fake() -> Iterator[FakeOAuthMcpServer]:
    server = FakeOAuthMcpServer()
    yield server
    server.close()


@pytest.fixture
def person(stack: LocalStack) -> Iterator[Browser]:
    browser = Browser(stack)
    yield browser
    browser.close()


def new_agent(stack: LocalStack, key: str | None = None) -> str:
    extra = {"key": key} if key else {}
    status, _, body = stack.invoke_api("POST", "/v1/agents", {"name": "oauth"}, **extra)
    assert status == 201, body
    return str(body["agent_id"])


def register(
    stack: LocalStack, agent_id: str, url: str, key: str | None = None, **auth: Any
) -> tuple[int, Any]:
    extra = {"key": key} if key else {}
    body = {"name": "linear", "url": url, "auth": {"type": "oauth", **auth}}
    status, _, answer = stack.invoke_api("POST", f"/v1/agents/{agent_id}/mcp-servers", body, **extra)
    return status, answer


def approve(person: Browser, authorization_url: str) -> dict[str, str]:
    """What a person's browser does: open the start link, on to the authorization server, which approves
    at once and redirects back to the callback (its query, not yet followed)."""
    return person.approve(authorization_url)


def callback(person: Browser, params: dict[str, str]) -> tuple[int, str]:
    return person.callback(CALLBACK, params)


def server_view(stack: LocalStack, agent_id: str, key: str | None = None) -> Any:
    extra = {"key": key} if key else {}
    status, _, body = stack.invoke_api("GET", f"/v1/agents/{agent_id}/mcp-servers/linear", **extra)
    assert status == 200, body
    return body


def call(agent_id: str, tool: str = "lookup", tenant_id: str = DEFAULT_TENANT) -> Any:
    server = store.get_server(tenant_id, agent_id, "linear")
    return mcp.call_tool(server, tool, {"q": "issue"}, tenant_id=tenant_id, agent_id=agent_id)


def authorized(stack: LocalStack, fake: FakeOAuthMcpServer, **auth: Any) -> str:
    agent_id = new_agent(stack)
    status, body = register(stack, agent_id, fake.url, **auth)
    assert status == 201, body
    person = Browser(stack)
    try:
        status, page = callback(person, approve(person, body["authorization_url"]))
    finally:
        person.close()
    assert status == 200, page
    return agent_id


def test_registration_authorization_and_calls_end_to_end(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    # When a server behind OAuth is registered
    agent_id = new_agent(stack)
    status, body = register(stack, agent_id, fake.url)

    # Then it waits for a person, with Stepwise's start link, which sends them on to the authorization
    # server found from the server's metadata
    assert status == 201, body
    assert body["status"] == "needs_authorization" and body["tools"] == []
    assert body["auth"] == {"type": "oauth", "scopes": None, "client_id": None}
    assert urlparse(body["authorization_url"]).path == START
    link = urlparse(person.open(body["authorization_url"]))
    query = query_of(link.geturl())
    assert f"{link.scheme}://{link.netloc}{link.path}" == f"{fake.origin}/authorize"
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43
    assert query["resource"] == fake.url and query["scope"] == " ".join(SCOPES)
    assert query["redirect_uri"].endswith(CALLBACK) and len(query["state"]) >= 43
    # registered dynamically, as a confidential client, under the tenant's name (not a shared one)
    assert fake.clients[query["client_id"]]["client_name"] == DEFAULT_TENANT

    # When the person approves and the authorization server sends them back
    status, page = callback(person, query_of(person.get(link.geturl()).headers["location"]))

    # Then the server is connected and its tools were discovered with the new token
    assert status == 200 and "Connected" in page and "3 tools found" in page
    view = server_view(stack, agent_id)
    assert view["status"] == "ready" and {t["name"] for t in view["tools"]} == {
        "lookup",
        "delete_item",
        "fail",
    }

    # And a call carries the token
    result = call(agent_id)
    assert result.error is None and result.output == "found: issue"

    # And no token or secret is in any answer, in the agent's item or in plain text at rest
    token = next(iter(fake.access))
    secret = fake.clients[query["client_id"]]["client_secret"]
    shown = str(view) + str(stack.invoke_api("GET", f"/v1/agents/{agent_id}")[2])
    stored = str(agents.get(DEFAULT_TENANT, agent_id).mcp_servers)
    items = boto3.client("dynamodb").scan(TableName=config.tables().mcp_auth)["Items"]
    assert items and all(token not in s and secret not in s for s in (shown, stored, str(items)))


def test_a_state_is_single_use_and_unknown_ones_are_refused(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    agent_id = new_agent(stack)
    _, body = register(stack, agent_id, fake.url)
    params = approve(person, body["authorization_url"])
    assert callback(person, params)[0] == 200

    # The same callback again is refused (410), and a state Stepwise never issued is forbidden (403)
    again, page = callback(person, params)
    assert again == 410 and "used already" in page
    assert callback(person, {**params, "state": "forged-state-value"})[0] == 403
    assert callback(person, {"code": "x"})[0] == 400


def test_another_tenants_state_cannot_authorize_its_server(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    # Given two tenants, each registering a server behind the same authorization server
    ours, theirs = new_agent(stack), new_agent(stack, OTHER_KEY)
    _, mine = register(stack, ours, fake.url)
    _, other = register(stack, theirs, fake.url, key=OTHER_KEY)

    # When our state comes back, in our browser, with the code the authorization server issued for the
    # other tenant's flow
    their_person = Browser(stack)
    their_code = approve(their_person, other["authorization_url"])["code"]
    their_person.close()
    our_state = approve(person, mine["authorization_url"])["state"]
    status, page = callback(person, {"code": their_code, "state": our_state})

    # Then the token endpoint refuses it (the code is bound to their PKCE verifier and client)
    assert status == 400 and "refused the code" in page
    # and neither server is authorized, nor are our tokens or tools anywhere near theirs
    assert server_view(stack, ours)["status"] == "needs_authorization"
    assert server_view(stack, theirs, key=OTHER_KEY)["status"] == "needs_authorization"
    assert call(ours).error.code == "mcp_needs_authorization"
    # and another tenant's agent is not found from our key at all
    assert stack.invoke_api("GET", f"/v1/agents/{theirs}/mcp-servers/linear")[0] == 404


def test_a_token_about_to_expire_is_refreshed_before_the_call(stack: LocalStack) -> None:
    fake = FakeOAuthMcpServer(access_ttl=30)  # within Stepwise's 60 s margin: refreshed before use
    try:
        agent_id = authorized(stack, fake)
        refreshes = len(fake.grants("refresh_token"))

        result = call(agent_id)

        assert result.error is None and result.output == "found: issue"
        assert len(fake.grants("refresh_token")) == refreshes + 1
        assert fake.grants("refresh_token")[-1]["resource"] == fake.url
    finally:
        fake.close()


def test_revoked_tokens_make_the_server_need_authorization_again(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    agent_id = authorized(stack, fake)
    assert call(agent_id).error is None

    # When the user revokes Stepwise's access at the provider (access and refresh tokens both die)
    fake.revoke()
    result = call(agent_id)

    # Then the call is an error result the model can read, after one refresh was tried
    assert result.error is not None and result.error.code == "mcp_needs_authorization"
    assert "authorize" in result.error.message
    assert fake.grants("refresh_token"), "a refresh was attempted before giving up"
    # and the API shows the server's status
    view = server_view(stack, agent_id)
    assert view["status"] == "needs_authorization"

    # When a person authorizes again from a new link
    status, _, again = stack.invoke_api("POST", f"/v1/agents/{agent_id}/mcp-servers/linear/authorize")
    assert status == 200 and again["authorization_url"]
    assert callback(person, approve(person, again["authorization_url"]))[0] == 200

    # Then calls work again, with the same registered client (no second registration)
    assert server_view(stack, agent_id)["status"] == "ready"
    assert call(agent_id).output == "found: issue"
    assert len(fake.clients) == 1


def test_more_scopes_asked_by_the_server_mean_a_new_authorization(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    agent_id = authorized(stack, fake, scopes=["mcp:read"])
    fake.required_scope = "mcp:admin"

    result = call(agent_id)

    assert result.error.code == "mcp_needs_authorization" and "mcp:admin" in result.error.message
    _, _, again = stack.invoke_api("POST", f"/v1/agents/{agent_id}/mcp-servers/linear/authorize")
    scope = query_of(person.open(again["authorization_url"]))["scope"]
    assert scope.split() == ["mcp:read", "mcp:admin"]  # the earlier grant plus what is asked for


def test_a_pre_registered_client_is_used_and_its_secret_never_shown(stack: LocalStack) -> None:
    fake = FakeOAuthMcpServer(registration=False)
    fake.add_client("tenant-app", "tenant-secret")
    try:
        agent_id = authorized(stack, fake, client_id="tenant-app", client_secret="tenant-secret")

        assert set(fake.clients) == {"tenant-app"}  # no dynamic registration
        view = server_view(stack, agent_id)
        assert view["auth"]["client_id"] == "tenant-app" and "tenant-secret" not in str(view)
        assert "tenant-secret" not in str(agents.get(DEFAULT_TENANT, agent_id).mcp_servers)
        assert call(agent_id).output == "found: issue"
    finally:
        fake.close()


@pytest.mark.parametrize("pre_registered", [True, False])
def test_reauthorizing_under_another_issuer_sends_it_no_old_token_or_secret(
    stack: LocalStack, pre_registered: bool
) -> None:
    # Review finding 1: the old grant's tokens (and the tenant's secret) went to the new issuer's /token.
    fake, other = FakeOAuthMcpServer(), FakeOAuthMcpServer()
    try:
        auth = {"client_id": "tenant-app", "client_secret": "tenant-secret"} if pre_registered else {}
        if pre_registered:
            fake.add_client("tenant-app", "tenant-secret")
        agent_id = authorized(stack, fake, **auth)

        # When the server's metadata now names another authorization server and a person re-authorizes
        fake.authorization_server = other.origin
        status, _, again = stack.invoke_api("POST", f"/v1/agents/{agent_id}/mcp-servers/linear/authorize")

        if pre_registered:  # the tenant's client belongs to the first issuer: refused, nothing sent
            assert status == 422 and "auth.client_id" in again["error"]["message"], again
        else:  # a new client is registered there, and the old tokens are not carried over to it
            assert status == 200 and len(other.clients) == 1, again
        fake.revoke()  # the next call's 401 makes the token source refresh at once
        result = call(agent_id)

        assert other.token_requests == []
        if not pre_registered:
            assert result.error is not None and result.error.code == "mcp_needs_authorization"
    finally:
        fake.close()
        other.close()


def test_an_authorization_server_without_registration_needs_a_client_id(stack: LocalStack) -> None:
    fake = FakeOAuthMcpServer(registration=False)
    try:
        agent_id = new_agent(stack)
        status, body = register(stack, agent_id, fake.url)
        assert status == 422 and "client_id" in body["error"]["message"]
        assert stack.invoke_api("GET", f"/v1/agents/{agent_id}/mcp-servers")[2]["mcp_servers"] == []
    finally:
        fake.close()


def test_bad_auth_configurations_are_refused(stack: LocalStack) -> None:
    agent_id = new_agent(stack)
    plain = FakeMcpServer()
    try:
        status, body = register(stack, agent_id, plain.url)
        assert status == 422 and body["error"]["code"] == "mcp_oauth_not_required"
    finally:
        plain.close()
    status, body = register(stack, agent_id, "http://127.0.0.1:9/mcp", client_secret="s")
    assert status == 422 and "client_id" in str(body)
    status, _, body = stack.invoke_api(
        "POST",
        f"/v1/agents/{agent_id}/mcp-servers",
        {
            "name": "x",
            "url": "http://127.0.0.1:9/mcp",
            "headers": {"Authorization": "t"},
            "auth": {"type": "oauth"},
        },
    )
    assert status == 422 and "Authorization" in str(body)
    status, body = register(stack, agent_id, "http://127.0.0.1:9/mcp", scopes=["has space"])
    assert status == 422


def grant_items(agent_id: str) -> list[str]:
    """The ids of the grants (client and tokens) kept for the agent's servers in McpAuthTable."""
    items = boto3.client("dynamodb").scan(TableName=config.tables().mcp_auth)["Items"]
    return [i["id"]["S"] for i in items if i["id"]["S"].startswith(f"grant#{DEFAULT_TENANT}#{agent_id}/")]


def test_a_callback_for_a_removed_server_is_gone_and_stores_nothing(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    # Given an authorization started, then the server removed before the person approved
    agent_id = new_agent(stack)
    _, body = register(stack, agent_id, fake.url)
    params = approve(person, body["authorization_url"])
    assert stack.invoke_api("DELETE", f"/v1/agents/{agent_id}/mcp-servers/linear")[0] == 204

    # When the authorization server sends the person back
    status, page = callback(person, params)

    # Then the link is gone (410), the code was never exchanged and no grant is kept for the server
    assert status == 410 and "Not connected" in page and "was removed" in page
    assert fake.grants("authorization_code") == []
    assert grant_items(agent_id) == []


def test_a_callback_for_a_server_removed_and_registered_again_does_not_authorize_the_new_one(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    # Given an authorization started, then the server removed and registered again under its name
    agent_id = new_agent(stack)
    _, first = register(stack, agent_id, fake.url)
    params = approve(person, first["authorization_url"])
    assert stack.invoke_api("DELETE", f"/v1/agents/{agent_id}/mcp-servers/linear")[0] == 204
    _, again = register(stack, agent_id, fake.url)
    assert again["status"] == "needs_authorization"

    # When the first link comes back
    status, page = callback(person, params)

    # Then it is gone (410) and the new registration stays unauthorized: the code was never exchanged
    assert status == 410 and "was removed" in page
    assert fake.grants("authorization_code") == []
    assert server_view(stack, agent_id)["status"] == "needs_authorization"
    assert len(grant_items(agent_id)) == 1  # the new registration's client only
    # and the new registration's own link still works
    assert callback(person, approve(person, again["authorization_url"]))[0] == 200
    assert server_view(stack, agent_id)["status"] == "ready"


def test_a_callback_for_a_deleted_agent_is_gone_and_stores_nothing(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    # Given an authorization started, then the whole agent deleted before the person approved
    agent_id = new_agent(stack)
    _, body = register(stack, agent_id, fake.url)
    params = approve(person, body["authorization_url"])
    assert stack.invoke_api("DELETE", f"/v1/agents/{agent_id}")[0] == 204

    # Then the agent's grant (its registered client) went with it
    assert grant_items(agent_id) == []

    # When the authorization server sends the person back
    status, page = callback(person, params)

    # Then the link is gone (410), the code was never exchanged and no tokens were written
    assert status == 410 and "Not connected" in page and "was removed" in page
    assert fake.grants("authorization_code") == [] and fake.access == {}
    assert grant_items(agent_id) == []


def test_a_grant_left_behind_by_a_deleted_agent_is_never_given_tokens(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    # Given an agent whose item went without its grant (deleted before agents dropped their grants)
    agent_id = new_agent(stack)
    _, body = register(stack, agent_id, fake.url)
    params = approve(person, body["authorization_url"])
    agents.delete(DEFAULT_TENANT, agent_id)
    assert len(grant_items(agent_id)) == 1

    # When the callback arrives, then it is gone and the server is looked for before the code is exchanged
    status, page = callback(person, params)
    assert status == 410 and "was removed" in page
    assert fake.grants("authorization_code") == [] and fake.access == {}


def test_a_server_removed_while_its_code_is_exchanged_keeps_no_tokens(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    # Given an authorization whose server is removed while the token endpoint is answering
    agent_id = new_agent(stack)
    _, body = register(stack, agent_id, fake.url)
    fake.before_token = lambda: servers.remove(DEFAULT_TENANT, agent_id, "linear")

    # When the callback exchanges the code
    status, page = callback(person, approve(person, body["authorization_url"]))

    # Then it answers gone, and the tokens it was given are not kept for a server that no longer exists
    assert status == 410 and "was removed" in page
    assert len(fake.grants("authorization_code")) == 1 and fake.access  # they were issued
    assert grant_items(agent_id) == []


# --- the callback is bound to the browser that opened the start link ----------------------------------


def test_the_start_link_sets_a_short_lived_cookie_the_callback_clears(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    agent_id = new_agent(stack)
    _, body = register(stack, agent_id, fake.url)

    params = approve(person, body["authorization_url"])

    # The cookie: HttpOnly, SameSite=Lax, for the integration's OAuth path, no longer than the state
    # (not Secure: the local stack's callback is http)
    (set_cookie,) = person.set_cookies
    cookie = parsed_cookie(set_cookie)
    assert cookie["httponly"] is True and cookie["samesite"] == "Lax" and "secure" not in cookie
    assert cookie["path"] == "/v1/integrations/mcp/oauth" and 0 < int(str(cookie["max-age"])) <= 600
    assert person.cookie() == cookie["value"] and len(str(cookie["value"])) >= 43
    # and only the nonce's hash is kept
    items = str(boto3.client("dynamodb").scan(TableName=config.tables().mcp_auth)["Items"])
    assert str(cookie["value"]) not in items

    assert callback(person, params)[0] == 200
    assert parsed_cookie(person.set_cookies[-1])["max-age"] == "0" and person.cookie() is None


def test_a_callback_without_the_flow_cookie_is_refused_and_stores_nothing(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    # Given a person who opened the start link and approved
    agent_id = new_agent(stack)
    _, body = register(stack, agent_id, fake.url)
    params = approve(person, body["authorization_url"])

    # When the code and state arrive from another browser (no cookie), or with a cookie not the flow's
    elsewhere = Browser(stack)
    try:
        bare, bare_page = callback(elsewhere, params)
        name = str(parsed_cookie(person.set_cookies[0])["name"])
        forged, forged_page = elsewhere.callback(
            CALLBACK, params, headers={"cookie": f"{name}=not-the-nonce"}
        )
    finally:
        elsewhere.close()

    # Then both are refused with the stable code, the code is never exchanged and no grant is stored
    assert (bare, forged) == (403, 403)
    assert "oauth_flow_not_bound" in bare_page and "oauth_flow_not_bound" in forged_page
    assert fake.grants("authorization_code") == [] and fake.access == {}
    assert server_view(stack, agent_id)["status"] == "needs_authorization"
    # and the state was not spent: the person's own browser still completes it
    assert callback(person, params)[0] == 200
    assert server_view(stack, agent_id)["status"] == "ready"


def test_a_start_link_opens_once_and_keeps_its_first_browser(
    stack: LocalStack, fake: FakeOAuthMcpServer, person: Browser
) -> None:
    agent_id = new_agent(stack)
    _, body = register(stack, agent_id, fake.url)
    params = approve(person, body["authorization_url"])

    # When the same link is opened again, in another browser
    second = Browser(stack)
    try:
        again = second.get(body["authorization_url"])
        # Then it is gone (410, its stable code), sets no cookie and sends nobody on
        assert again.status_code == 410 and "oauth_flow_opened" in again.text
        assert "location" not in again.headers and second.set_cookies == [] and second.cookie() is None
        # and the binding is the first browser's still: the second cannot complete it
        assert callback(second, params)[0] == 403
    finally:
        second.close()
    assert callback(person, params)[0] == 200

    # A link we never issued, or none at all, opens nothing
    assert person.get(f"{START}?flow=never-issued").status_code == 403
    assert person.get(START).status_code == 400

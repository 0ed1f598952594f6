"""The web console in headless Chromium against the local stack over HTTP: sign in with the key, watch a
run's timeline stream to its end, approve its pending call and answer a client tool from the page, on a
desktop and on a phone. Screenshots for review go to bench/results/console/ (gitignored)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from playwright.sync_api import Error as PlaywrightError

from bench import console_weight
from stepwise.console.assets import CSP
from tests.e2e.support import KEY
from tests.fakes.receiver import Receiver, Reply

SHOTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "console"
VIEWPORTS: dict[str, dict[str, Any]] = {
    "desktop": {"viewport": {"width": 1280, "height": 900}},
    "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True},
}
TIMEOUT_MS = 30_000  # the machine is shared: a step of a run may take seconds
expect.set_options(timeout=TIMEOUT_MS)
# Run in the page before its own scripts (Playwright injects it over DevTools, so the CSP does not apply):
# every violation the page causes is kept for the test to read.
WATCH_CSP = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__violations.push(`${e.violatedDirective} ${e.blockedURI}`);
});
"""


@dataclass
class Console:
    page: Page
    name: str
    problems: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def shot(self, what: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{self.name}-{what}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path

    def violations(self) -> list[str]:
        found: list[str] = self.page.evaluate("window.__violations")
        return found


def _open(browser: Browser, base_url: str, name: str) -> Iterator[Console]:
    context = browser.new_context(**VIEWPORTS[name])
    context.set_default_timeout(TIMEOUT_MS)
    context.add_init_script(WATCH_CSP)
    page = context.new_page()
    console = Console(page, name)
    page.on("console", lambda m: m.type == "error" and console.problems.append(f"error: {m.text}"))
    page.on("pageerror", lambda e: console.problems.append(f"page error: {e}"))
    page.on("request", lambda r: console.urls.append(r.url))
    response = page.goto(f"{base_url}/v1/console")
    assert response is not None and response.status == 200
    assert response.headers["content-security-policy"] == CSP
    yield console
    context.close()


@pytest.fixture(params=list(VIEWPORTS))
def console(request: pytest.FixtureRequest, browser: Browser, base_url: str) -> Iterator[Console]:
    yield from _open(browser, base_url, request.param)


@pytest.fixture
def desktop(browser: Browser, base_url: str) -> Iterator[Console]:
    yield from _open(browser, base_url, "desktop")


def sign_in(console: Console) -> None:
    page = console.page
    try:
        page.get_by_label("API key").fill(KEY)
    except PlaywrightError as exc:  # say what the page did instead of only that the form never came
        raise AssertionError(f"no sign-in form: {console.problems} {console.urls}\n{page.content()}") from exc
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#nav")).to_be_visible()


def assert_clean(console: Console) -> None:
    """The key is in the tab's session storage and nowhere else; the page broke no rule of its CSP."""
    page = console.page
    assert page.evaluate("window.sessionStorage.getItem('stepwise.api_key')") == KEY
    assert page.evaluate("window.localStorage.length") == 0
    assert KEY not in page.url
    assert console.urls and not [url for url in console.urls if KEY in url]
    assert console.violations() == []
    assert console.problems == []


def fits_the_screen(page: Page) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def shown_cost(value: float | None) -> str:
    """The console's way of writing a cost (dom.js `dollars`)."""
    if value is None:
        return "—"
    return f"${value:.6f}" if 0 < abs(value) < 0.01 else f"${value:.4f}"


def start(api: httpx.Client, agent_id: str, message: str, script: list[dict[str, Any]]) -> dict[str, Any]:
    created = api.post(f"/v1/agents/{agent_id}/runs", json={"message": message, "script": script})
    assert created.status_code == 202, created.text
    run: dict[str, Any] = created.json()
    return run


def test_watching_a_run_and_approving_its_call_from_the_console(
    api: httpx.Client, receiver: Receiver, console: Console
) -> None:
    receiver.replies["/lookup"] = Reply(body={"email": "ceo@example.com"})
    tools = [
        {
            "type": "http",
            "name": "lookup",
            "description": "Find a person's address",
            "input_schema": {"type": "object", "properties": {"who": {"type": "string"}}},
            "endpoint": f"{receiver.url}/lookup",
            "read_only": True,
        },
        {
            "type": "http",
            "name": "send_email",
            "description": "Send an email",
            "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
            "endpoint": f"{receiver.url}/send",
            "permission": "ask",
        },
    ]
    agent = api.post("/v1/agents", json={"name": f"console-mailer-{console.name}", "tools": tools}).json()
    script = [
        {"tool_calls": [{"name": "lookup", "arguments": {"who": "the ceo"}}]},
        {"tool_calls": [{"name": "send_email", "arguments": {"to": "ceo@example.com"}}]},
        {"text": "Mailed the ceo."},
    ]
    run = start(api, agent["agent_id"], "mail the ceo", script)
    page = console.page

    sign_in(console)
    row = page.locator(f'[data-run-id="{run["run_id"]}"]')
    expect(row).to_be_visible()
    expect(row.locator(".status")).to_have_text(re.compile(r"^(queued|running|waiting)$"))
    expect(row.locator(".cost")).to_have_text(re.compile(r"^(\$\d+\.\d{4,6}|—)$"))
    console.shot("runs")

    row.get_by_role("link", name=run["run_id"]).click()
    wait = page.locator(".pending .wait")
    expect(wait).to_contain_text("send_email")
    expect(wait).to_contain_text('"to": "ceo@example.com"')
    expect(page.locator(".event-tool_call").first).to_contain_text('"who": "the ceo"')
    expect(page.locator(".event-tool_result").first).to_contain_text('"email": "ceo@example.com"')
    expect(page.locator(".event-approval_requested")).to_contain_text("send_email")
    assert receiver.to("/send") == []  # looking decides nothing
    console.shot("run-waiting")

    wait.get_by_role("button", name="Approve").click()

    # The page was open before the approval: what follows arrives on its long poll.
    expect(page.locator(".live")).to_have_text("The run ended: succeeded.")
    expect(page.locator(".event-approval_decided")).to_contain_text("Approved")
    expect(page.locator(".event-run_completed .answer")).to_have_text("Mailed the ceo.")
    expect(page.locator(".output")).to_have_text("Mailed the ceo.")
    expect(page.locator(".pending .wait")).to_have_count(0)
    console.shot("run-finished")
    final = api.get(f"/v1/runs/{run['run_id']}").json()
    assert final["status"] == "succeeded"
    expect(page.locator(".facts .cost")).to_have_text(shown_cost(final["total_usage"]["cost_usd"]))
    assert [r.json() for r in receiver.to("/send")] == [{"to": "ceo@example.com"}]

    page.get_by_role("link", name=run["session_id"]).click()
    conversation = page.locator(".conversation")
    expect(conversation.locator(".message-user").first).to_contain_text("mail the ceo")
    expect(conversation.locator(".message-assistant").last).to_contain_text("Mailed the ceo.")
    console.shot("session")

    page.get_by_role("link", name="Agents").click()
    # The session page also names the agent (facts, timeline): wait for the agents page itself first.
    expect(page).to_have_url(re.compile(r"#/agents$"))
    expect(page.locator("main").get_by_role("link", name=agent["name"]).first).to_be_visible()
    console.shot("agents")

    assert fits_the_screen(page)
    assert_clean(console)
    # bench/console_weight.py counts exactly the files the browser loaded.
    fetched = {url.rsplit("/", 1)[1] for url in console.urls if "/v1/console/" in url}
    assert fetched | {"index.html"} == {asset.name for asset in console_weight.loaded()}


def test_answering_a_client_tool_of_a_delegated_run_from_the_console(
    api: httpx.Client, desktop: Console
) -> None:
    # The child's client tool waits in the child's run; its request is written to the root's stream too,
    # so the root's page can answer it.
    picker = {
        "type": "client",
        "name": "pick_color",
        "description": "Ask the user for a color",
        "input_schema": {"type": "object", "properties": {"palette": {"type": "string"}}},
    }
    child_script = [
        {"tool_calls": [{"name": "pick_color", "arguments": {"palette": "warm"}}]},
        {"text": "amber"},
    ]
    designer = api.post(
        "/v1/agents", json={"name": "console-designer", "tools": [picker], "script": child_script}
    ).json()
    delegate = {
        "type": "agent",
        "name": "designer",
        "description": "Ask the designer.",
        "agent_id": designer["agent_id"],
    }
    lead = api.post("/v1/agents", json={"name": "console-lead", "tools": [delegate]}).json()
    script = [
        {"tool_calls": [{"name": "designer", "arguments": {"message": "pick a color"}}]},
        {"text": "done"},
    ]
    run = start(api, lead["agent_id"], "design it", script)
    page = desktop.page

    sign_in(desktop)
    page.goto(f"{page.url.split('#')[0]}#/runs/{run['run_id']}")
    wait = page.locator(".pending .wait")
    expect(wait).to_contain_text("pick_color")
    expect(wait).to_contain_text('"palette": "warm"')
    child_link = page.locator(".event-delegation_started a[href^='#/runs/']")  # the other names the agent
    expect(child_link).to_be_visible()
    child_id = child_link.inner_text()
    desktop.shot("client-tool-waiting")

    wait.get_by_label("Output (JSON, or plain text)").fill('{"color": "amber"}')
    wait.get_by_role("button", name="Send result").click()

    expect(page.locator(".live")).to_have_text("The run ended: succeeded.")
    expect(page.locator(".event-delegation_completed")).to_contain_text("succeeded")
    expect(page.locator(".output")).to_have_text("done")
    desktop.shot("client-tool-finished")

    # The child's own page: its tool result is the answer given above, and it links back to its parent.
    child_link.click()
    expect(page.locator("h1")).to_contain_text(child_id)
    expect(page.locator(".live")).to_have_text("The run ended: succeeded.")
    expect(page.locator(".event-tool_result")).to_contain_text('"color": "amber"')
    expect(page.locator(".facts").get_by_role("link", name=run["run_id"])).to_be_visible()
    child = api.get(f"/v1/runs/{child_id}").json()
    assert child["parent_run_id"] == run["run_id"] and child["output"] == "amber"
    assert_clean(desktop)


def test_a_refused_key_is_not_kept(desktop: Console) -> None:
    page = desktop.page
    page.get_by_label("API key").fill("sk-not-a-key")
    page.get_by_role("button", name="Sign in").click()

    expect(page.get_by_role("alert")).to_have_text("The API refused that key.")
    assert page.evaluate("window.sessionStorage.length") == 0
    expect(page.locator("#nav")).to_be_hidden()


def test_an_address_that_is_not_valid_percent_encoding_says_so(desktop: Console) -> None:
    # Given a signed-in console
    sign_in(desktop)
    page = desktop.page

    # When the address is edited by hand into something decodeURIComponent refuses
    page.goto(f"{page.url.split('#')[0]}#/runs/%E0")

    # Then the page says what went wrong rather than staying blank, and nothing escaped as a page error
    expect(page.get_by_role("alert")).to_contain_text("URI")
    assert desktop.problems == []


def test_a_what_if_is_compared_with_its_original_side_by_side(
    api: httpx.Client, receiver: Receiver, console: Console
) -> None:
    tools = [
        {
            "type": "http",
            "name": "send_email",
            "description": "Send an email",
            "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"]},
            "endpoint": f"{receiver.url}/send",
        }
    ]
    agent = api.post("/v1/agents", json={"name": f"console-what-if-{console.name}", "tools": tools}).json()
    mail = [{"name": "send_email", "arguments": {"to": "ada@example.com"}}]
    script = [{"tool_calls": mail}, {"text": "Mailed Ada."}]
    original = start(api, agent["agent_id"], "mail Ada", script)
    eventually_ended(api, original["run_id"])
    other = [{"name": "send_email", "arguments": {"to": "grace@example.com"}}]
    body = {
        "system_prompt": "Be brief.",
        "script": [{"tool_calls": [*mail, *other]}, {"text": "Mailed both."}],
    }
    created = api.post(f"/v1/runs/{original['run_id']}/what-if", json=body)
    assert created.status_code == 201, created.text
    what_if = created.json()
    eventually_ended(api, what_if["run_id"])
    page = console.page

    sign_in(console)
    page.goto(f"{page.url.split('#')[0]}#/runs/{what_if['run_id']}")
    expect(page.locator(".live")).to_have_text("The run ended: succeeded.")
    page.get_by_role("link", name="compare side by side").click()

    rows = page.locator(".compare-timelines tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_contain_text("matched")
    expect(rows.nth(0)).to_contain_text("served from")
    expect(rows.nth(1)).to_contain_text("diverged")
    expect(rows.nth(1)).to_contain_text("not_recorded")
    expect(page.locator("tr.first-divergence")).to_contain_text("grace@example.com")
    expect(page.get_by_text("First divergence at call 1: only in b.")).to_be_visible()
    expect(page.locator(".compare-side .output")).to_have_text(["Mailed Ada.", "Mailed both."])
    console.shot("compare")
    assert len(receiver.to("/send")) == 1  # the what-if sent nothing
    assert fits_the_screen(page)
    assert_clean(console)


def eventually_ended(api: httpx.Client, run_id: str) -> None:
    from tests.eventually import eventually

    def ended() -> bool:
        run = api.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "succeeded", run
        return True

    eventually(ended, timeout=60, what=f"run {run_id} to succeed")


# --- Names, filters, durations, the waterfall and the search box (issue 28, goal 8) -------------------


def shown_duration(ms: int) -> str:
    """The console's way of writing a duration (dom.js `duration`); toFixed rounds the float's exact
    value half up, as Decimal does here."""
    if ms < 1000:
        return f"{max(ms, 0)} ms"
    s = ms / 1000
    if s < 60:
        return f"{Decimal(s).quantize(Decimal('0.1'), ROUND_HALF_UP)} s"
    if s < 3600:
        return f"{int(s // 60)} m {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int((s % 3600) // 60):02d} m"


def millis(at: str) -> int:
    """An event's time as the browser's Date.parse reads it: whole milliseconds."""
    when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(milliseconds=1)


def test_runs_are_named_filtered_timed_and_drawn_as_a_waterfall(
    api: httpx.Client, receiver: Receiver, console: Console
) -> None:
    # Given an agent with a slow tool, and two finished runs of it for two end users
    receiver.replies["/slow"] = Reply(body={"found": 42}, delay=0.3)
    tool = {
        "type": "http",
        "name": "slow_lookup",
        "description": "Look it up, slowly",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "endpoint": f"{receiver.url}/slow",
        "read_only": True,
    }
    name = f"console-timer-{console.name}"
    agent = api.post("/v1/agents", json={"name": name, "tools": [tool]}).json()
    script = [{"tool_calls": [{"name": "slow_lookup", "arguments": {"q": "answer"}}]}, {"text": "42."}]
    runs = {}
    for user in ("ada", "bob"):
        body = {"message": f"look it up for {user}", "user_id": user, "script": script}
        created = api.post(f"/v1/agents/{agent['agent_id']}/runs", json=body)
        assert created.status_code == 202, created.text
        runs[user] = created.json()
        eventually_ended(api, runs[user]["run_id"])
    ada, bob = (api.get(f"/v1/runs/{runs[u]['run_id']}").json() for u in ("ada", "bob"))
    page = console.page
    # Pages of one run, so paging through next_token is seen with two runs (the page size is the
    # API's 50 otherwise): every list request the console makes is sent on with limit=1.
    page.route(
        re.compile(r".*/v1/runs\?.*"), lambda route: route.continue_(url=f"{route.request.url}&limit=1")
    )
    sign_in(console)

    # When the list is filtered to the agent, by its name, from the form
    filters = page.locator("form.filters")
    if not filters.is_visible():  # folded on a phone
        page.get_by_text("Filters", exact=True).click()
    filters.get_by_label("Agent").select_option(label=name)
    filters.get_by_role("button", name="Filter").click()

    # Then the hash holds the filter, one run shows, and the next page comes through its token
    expect(page).to_have_url(re.compile(rf"#/runs\?agent={agent['agent_id']}$"))
    rows = page.locator(".runs .run-row")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-run-id", bob["run_id"])  # newest first
    page.get_by_role("button", name="Older runs").click()
    expect(rows).to_have_count(2)
    expect(rows.nth(1)).to_have_attribute("data-run-id", ada["run_id"])
    expect(page.get_by_role("button", name="Older runs")).to_be_hidden()
    # each row names its agent (the id is the tooltip, and a button copies it) and says how long it took
    agent_link = rows.first.get_by_role("link", name=name)
    expect(agent_link).to_have_attribute("title", agent["agent_id"])
    expect(rows.first.get_by_role("button", name=f"Copy {agent['agent_id']}")).to_be_visible()
    took = millis(bob["finished_at"]) - millis(bob["created_at"])
    expect(rows.first.locator(".duration")).to_have_text(shown_duration(took))
    expect(rows.first.locator(".user")).to_have_text("user bob")
    console.shot("runs-filtered")

    # When the filters come from the address (a shared link, a reload): a user, then a window
    base = page.url.split("#")[0]
    page.goto(f"{base}#/runs?agent={agent['agent_id']}&user=ada&status=succeeded")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-run-id", ada["run_id"])
    page.reload()
    expect(page.locator("form.filters input[name=user]")).to_have_value("ada")
    expect(page.locator("form.filters select[name=status]")).to_have_value("succeeded")
    expect(rows).to_have_count(1)
    page.goto(f"{base}#/runs?agent={agent['agent_id']}&to=2020-01-01")
    expect(page.locator(".runs .note")).to_have_text("No runs match these filters.")
    page.goto(f"{base}#/runs?agent={agent['agent_id']}&trigger=schedule")
    expect(page.locator(".runs .note")).to_have_text("No runs match these filters.")

    # When a run's id is put in the search box
    search = page.get_by_role("searchbox", name="Find a run or session by id")
    search.fill(f"  {ada['run_id']} ")
    search.press("Enter")

    # Then its page draws a bar per step, model call and tool call, each as long as its events say
    expect(page.locator("h1")).to_contain_text(ada["run_id"])
    expect(page.locator(".live")).to_have_text("The run ended: succeeded.")
    events = api.get(f"/v1/runs/{ada['run_id']}/events").json()["events"]
    at = {
        (e["type"], e["data"].get("step") or e["data"].get("tool_call_id")): millis(e["at"]) for e in events
    }
    chart = page.locator("svg.waterfall")
    run_bar = chart.locator("g[data-kind=run]")  # the whole run, gaps between steps included
    expect(run_bar).to_have_attribute("data-ms", str(at[("run_completed", None)] - at[("run_started", None)]))
    expect(chart.locator("g[data-kind=step]")).to_have_count(2)
    expect(chart.locator("g[data-kind=model]")).to_have_count(2)
    expect(chart.locator("g[data-kind=tool]")).to_have_count(1)
    for step in (1, 2):
        model_ms = at[("step_completed", step)] - at[("step_started", step)]
        expect(chart.locator(f"g[data-kind=model][data-step='{step}']")).to_have_attribute(
            "data-ms", str(model_ms)
        )
    call_id = next(e["data"]["tool_call_id"] for e in events if e["type"] == "tool_call")
    tool_ms = at[("tool_result", call_id)] - at[("tool_call", call_id)]
    assert tool_ms >= 300  # the receiver took 0.3 s to answer
    expect(chart.locator("g[data-kind=tool]")).to_have_attribute("data-ms", str(tool_ms))
    expect(chart.locator("g[data-kind=tool] title")).to_contain_text(
        f"slow_lookup: {shown_duration(tool_ms)}"
    )
    expect(page.locator(".event-tool_result .took")).to_have_text(f" · {shown_duration(tool_ms)}")
    # the run's cost per step, on each step's header and its bar
    for step in (1, 2):
        usage = next(
            e["data"]["usage"] for e in events if e["type"] == "step_completed" and e["data"]["step"] == step
        )
        header = page.locator(f".step[data-step='{step}'] .step-took")
        expect(header).to_have_text(re.compile(rf" · {re.escape(shown_cost(usage.get('cost_usd')))}$"))
        expect(chart.locator(f"g[data-kind=step][data-step='{step}'] .dur")).to_have_text(
            re.compile(rf" · {re.escape(shown_cost(usage.get('cost_usd')))}$")
        )
    # the run's own facts: its agent by name, its duration
    facts = page.locator(".facts")
    expect(facts.get_by_role("link", name=name)).to_have_attribute("title", agent["agent_id"])
    run_ms = millis(ada["finished_at"]) - millis(ada["created_at"])
    expect(facts.locator(".duration")).to_have_text(shown_duration(run_ms))
    expect(page.locator(".event-run_started").get_by_role("link", name=name)).to_be_visible()
    assert fits_the_screen(page)
    console.shot("run-waterfall")

    # And a session id in the search box opens the session, its agent named too
    search.fill(ada["session_id"])
    search.press("Enter")
    expect(page.locator("h1")).to_contain_text(ada["session_id"])
    expect(page.locator(".crumbs").get_by_role("link", name=name)).to_be_visible()
    # something that is neither is refused where it was typed, and the page stays
    search.fill("hello")
    search.press("Enter")
    assert page.evaluate("document.getElementById('find-id').validationMessage")
    expect(page.locator("h1")).to_contain_text(ada["session_id"])
    assert_clean(console)


def test_an_agents_id_is_copied_from_its_name(api: httpx.Client, desktop: Console) -> None:
    agent = api.post("/v1/agents", json={"name": "console-copied"}).json()
    page = desktop.page
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    sign_in(desktop)
    page.goto(f"{page.url.split('#')[0]}#/agents/{agent['agent_id']}")

    page.get_by_role("button", name=f"Copy {agent['agent_id']}").click()

    expect(page.get_by_role("button", name=f"Copy {agent['agent_id']}")).to_have_text("copied")
    assert page.evaluate("navigator.clipboard.readText()") == agent["agent_id"]
    assert_clean(desktop)

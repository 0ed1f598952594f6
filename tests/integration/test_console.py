"""GET /v1/console and its files through the gateway, as API Gateway routes them: public, with the
console's CSP, an unknown file a 404 in the contract's error shape."""

from __future__ import annotations

import re
import sys

import pytest

from stepwise.console import assets
from stepwise_local.stack import LocalStack

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@pytest.mark.parametrize("key", [None, "sk-not-a-key"], ids=["no key", "a bad key"])
def test_the_page_is_served_without_a_key_with_a_strict_csp(stack: LocalStack, key: str | None) -> None:
    status, headers, body = stack.invoke_api("GET", "/v1/console", key=key)

    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["content-security-policy"] == CSP
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    # No inline script or style for the CSP to refuse: the page loads its module and stylesheet.
    assert '<script type="module" src="console/app.js"></script>' in body
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", body)
    assert "<style" not in body and " style=" not in body


@pytest.mark.parametrize(
    ("name", "content_type"),
    [("app.js", "text/javascript; charset=utf-8"), ("style.css", "text/css; charset=utf-8")],
)
def test_the_pages_files_are_served_with_their_types(stack: LocalStack, name: str, content_type: str) -> None:
    status, headers, body = stack.invoke_api("GET", f"/v1/console/{name}", key=None)

    assert status == 200
    assert headers["content-type"] == content_type
    assert headers["content-security-policy"] == CSP
    assert body == assets.files()[name].body


def test_every_module_the_page_imports_is_served(stack: LocalStack) -> None:
    # The modules import each other by relative name: each one named must be a file of the console.
    imported = {
        target
        for asset in assets.files().values()
        if asset.name.endswith(".js")
        for target in re.findall(r'from "\./([\w-]+\.js)"', asset.body)
    }

    assert imported >= {"api.js", "dom.js", "timeline.js"}
    for name in imported:
        assert stack.invoke_api("GET", f"/v1/console/{name}", key=None)[0] == 200, name


@pytest.mark.parametrize("name", ["nope.js", "index.html", "assets.py", "__init__.py"])
def test_an_unknown_file_is_a_404_in_the_error_shape(stack: LocalStack, name: str) -> None:
    status, headers, body = stack.invoke_api("GET", f"/v1/console/{name}", key=None)

    assert status == 404
    assert headers["content-type"] == "application/json"
    assert body["error"]["code"] == "asset_not_found"


def test_a_current_copy_is_a_304_without_a_body(stack: LocalStack) -> None:
    _, first, _ = stack.invoke_api("GET", "/v1/console/app.js", key=None)
    status, headers, body = stack.invoke_api(
        "GET", "/v1/console/app.js", key=None, headers={"If-None-Match": first["etag"]}
    )
    stale = stack.invoke_api("GET", "/v1/console/app.js", key=None, headers={"If-None-Match": '"old"'})

    assert status == 304 and body == ""
    assert headers["etag"] == first["etag"]
    assert stale[0] == 200


def test_parallel_requests_to_the_api_function_never_see_each_others_state(stack: LocalStack) -> None:
    # A browser loads the page's modules in parallel, and the local stack serves them on threads of one
    # process: each answer must be its own (its file, its tenant), as from separate Lambda instances.
    from concurrent.futures import ThreadPoolExecutor

    from tests.integration.support import OTHER_KEY

    mine = stack.invoke_api("POST", "/v1/agents", {"name": "parallel-mine"})[2]["agent_id"]
    theirs = stack.invoke_api("POST", "/v1/agents", {"name": "parallel-theirs"}, key=OTHER_KEY)[2]["agent_id"]
    names = [n for n in assets.files() if n != assets.INDEX]

    def load(i: int) -> bool:
        name = names[i % len(names)]
        status, _, body = stack.invoke_api("GET", f"/v1/console/{name}", key=None)
        key = OTHER_KEY if i % 2 else None
        agents = stack.invoke_api("GET", "/v1/agents", **({"key": key} if key else {}))[2]["agents"]
        seen = {a["agent_id"] for a in agents}
        own, other = (theirs, mine) if key else (mine, theirs)
        return status == 200 and body == assets.files()[name].body and own in seen and other not in seen

    # Threads switch every few microseconds instead of every 5 ms, so that requests interleave inside
    # the resolver as they do under a browser's parallel loads.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(load, range(96)))
    finally:
        sys.setswitchinterval(interval)

    assert all(results), results.count(False)

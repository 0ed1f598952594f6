"""web_scrape's images in real runs on the local stack: a page's images fetched through the SSRF guard
and shown to a vision model as image parts; described by STEPWISE_VISION_MODEL for a model that cannot
see; listed only when neither can use them; a URL that is itself an image skips Firecrawl. One loopback
server plays Firecrawl and the site; an OpenAI-compatible fake records what the models were sent."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stepwise_local.stack import LocalStack
from tests.fakes.files import png
from tests.fakes.openai_server import FakeOpenAI
from tests.integration.support import wait_for_run

VISION = "openai/gpt-4o"
BLIND = "openai/gpt-fake"
PICTURE = png(4, 4)


class Site:
    """Firecrawl's /v1/scrape and the pages' images on one loopback port, recording every request."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.seen.append(f"GET {self.path}")
                if self.path.endswith(".png"):
                    self._send(200, "image/png", PICTURE)
                else:
                    self._send(200, "text/html", b"<html>not an image</html>")

            def do_POST(self) -> None:
                site.seen.append(f"POST {self.path}")
                self.rfile.read(int(self.headers["Content-Length"]))
                base = site.url
                markdown = (
                    "# Catalogue\n"
                    f"![a red square]({base}/red.png)\n"
                    "![relative](/shelf.png)\n"
                    f"![a page, not a picture]({base}/fake.jpg)\n"
                    "![metadata](http://169.254.169.254/latest/meta-data/x.png)\n"
                    "![inline](data:image/png;base64,AAAA)\n"
                )
                body = {
                    "success": True,
                    "data": {"markdown": markdown, "metadata": {"sourceURL": f"{base}/page"}},
                }
                self._send(200, "application/json", json.dumps(body).encode())

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def site(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    from stepwise.settings.accessor import invalidate

    served = Site()
    monkeypatch.setenv("FIRECRAWL_BASE_URL", served.url)
    assert stack.invoke_api("PUT", "/v1/settings/FIRECRAWL_API_KEY", {"value": "fc-key"})[0] == 200
    invalidate("local")
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    yield fake
    fake.close()


def scrape_run(stack: LocalStack, model_name: str) -> dict[str, Any]:
    status, _, agent = stack.invoke_api(
        "POST", "/v1/agents", {"name": "pages", "model": model_name, "tools": [{"name": "web_scrape"}]}
    )
    assert status == 201, agent
    _, _, accepted = stack.invoke_api("POST", f"/v1/agents/{agent['agent_id']}/runs", {"message": "look"})
    # A generous bound: the first model step of a run on a real provider's path imports litellm.
    run = wait_for_run(stack, accepted["run_id"], timeout=180)
    assert run["status"] == "succeeded", run
    _, _, page = stack.invoke_api("GET", f"/v1/runs/{run['run_id']}/events?after=0&wait=2")
    (result,) = [e["data"] for e in page["events"] if e["type"] == "tool_result"]
    return dict(result)


def image_parts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    return (
        [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
        if isinstance(content, list)
        else []
    )


def test_a_pages_images_reach_a_vision_model_as_image_parts(
    stack: LocalStack, site: Site, model: FakeOpenAI
) -> None:
    model.tool_calls([("web_scrape", {"url": f"{site.url}/page", "include_images": True})])
    model.text("a red square on a shelf")

    result = scrape_run(stack, VISION)

    red, shelf, fake, metadata = result["output"]["images"]
    assert red["shown"].startswith("image 1 (image/png") and shelf["url"] == f"{site.url}/shelf.png"
    assert shelf["shown"].startswith("image 2")
    assert fake["skipped"] == "not a PNG, JPEG, GIF or WebP image"
    assert "shown" not in metadata and metadata["skipped"]  # the SSRF guard refused it, no socket opened
    assert [s for s in site.seen if s.startswith("GET")] == [
        "GET /red.png",
        "GET /shelf.png",
        "GET /fake.jpg",
    ]
    after = model.bodies[1]["messages"]
    carrier = after[[m["role"] for m in after].index("tool") + 1]
    assert image_parts(carrier) == ["data:image/png;base64," + base64.b64encode(PICTURE).decode()] * 2


def test_an_image_url_skips_the_scraper_and_is_described_for_a_blind_model(
    stack: LocalStack, site: Site, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPWISE_VISION_MODEL", VISION)
    model.tool_calls([("web_scrape", {"url": f"{site.url}/photo.png"})])
    model.text("A small red square.")  # the vision model's description
    model.text("It shows a small red square.")

    result = scrape_run(stack, BLIND)

    assert result["output"]["content_type"] == "image/png" and result["output"]["images"][0]["shown"]
    assert site.seen == ["GET /photo.png"]  # no POST /v1/scrape
    _, described, answered = model.bodies
    assert described["model"] == "gpt-4o" and len(image_parts(described["messages"][0])) == 1
    tool = next(m for m in answered["messages"] if m["role"] == "tool")
    assert "described for you" in tool["content"] and "A small red square." in tool["content"]
    assert not any(image_parts(m) for m in answered["messages"])  # the blind model gets no image


def test_without_a_vision_model_a_blind_model_gets_the_images_listed_and_nothing_is_fetched(
    stack: LocalStack, site: Site, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STEPWISE_VISION_MODEL", raising=False)
    model.tool_calls([("web_scrape", {"url": f"{site.url}/page", "include_images": True})])
    model.text("there are pictures")

    result = scrape_run(stack, BLIND)

    assert [i["alt"] for i in result["output"]["images"]] == [
        "a red square",
        "relative",
        "a page, not a picture",
        "metadata",
    ]
    assert not [i for i in result["output"]["images"] if "shown" in i or "skipped" in i]
    assert site.seen == ["POST /v1/scrape"]

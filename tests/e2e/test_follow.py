"""Following a run over the local stack's follow WebSocket API, as a browser or the CLI does: a URL
from `POST /v1/runs/{run_id}/follow`, then a real WebSocket on its own loopback port."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx
from websockets.sync.client import connect

from tests.e2e.test_local_stack import create_agent, run_events, start_run


def test_a_run_is_received_over_a_websocket_through_its_terminal_event_and_the_close(
    api: httpx.Client, base_url: str
) -> None:
    run = start_run(api, create_agent(api))
    issued = api.post(f"/v1/runs/{run['run_id']}/follow", params={"after": 0})
    assert issued.status_code == 200, issued.text
    url = issued.json()["url"]
    assert url.startswith("ws://127.0.0.1:") and urlsplit(url).port != urlsplit(base_url).port

    with connect(url, open_timeout=10) as socket:
        received = [json.loads(message) for message in socket]  # until the server closes it
        assert socket.close_code == 1000

    assert received == run_events(api, run["run_id"])
    assert received[-1]["type"] == "run_completed"


def test_another_tenants_run_cannot_be_followed(api: httpx.Client, other: httpx.Client) -> None:
    run = start_run(api, create_agent(api))

    response = other.post(f"/v1/runs/{run['run_id']}/follow")

    assert response.status_code == 404 and response.json()["error"]["code"] == "run_not_found"

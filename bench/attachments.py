"""Input tokens of a five-turn session that starts with a 1 MB image, with and without the later-turn
stripping (stepwise.attachments.render: a file is shown in its own turn, a one-line note after).

The real path runs: an agent on "openai/gpt-4o" (litellm knows it sees images), litellm over loopback
HTTP to tests/fakes/openai_server.py, the handlers in process on the local stack. Five runs share one
session; the first attaches a 1 MB PNG (1024×768, padded to 1,000,000 bytes) inline. Every request the
fake receives is counted as sent: input tokens with litellm's token counter for gpt-4o (an image
costs its tiles, by its dimensions), and the request's bytes (what travels, base64 included). "Without
stripping" is the same session with the note replaced by the file in every turn
(`expand(strip_earlier=False)`), what a runtime that re-sends history as stored would send.
"""

from __future__ import annotations

import base64
import functools
import json
import os
from typing import Any

from bench.harness import Section, local

MODEL = "openai/gpt-4o"
TURNS = 5
IMAGE_BYTES = 1_000_000


def _image() -> bytes:
    from tests.fakes.files import png

    bare = png(1024, 768)
    return png(1024, 768, padding=IMAGE_BYTES - len(bare) - 12 - 4)  # the chunk's framing and keyword


def _session(agent_id: str, image: bytes) -> None:
    env = local()
    attachment = {"name": "photo.png", "content_type": "image/png", "data": base64.b64encode(image).decode()}
    session_id = None
    for turn in range(TURNS):
        body: dict[str, Any] = {"message": f"turn {turn + 1}: what else do you see?"}
        if turn == 0:
            body["attachments"] = [attachment]
        if session_id:
            body["session_id"] = session_id
        status, _, accepted = env.stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", body)
        if status != 202:
            raise RuntimeError(f"run not accepted: {status} {accepted}")
        session_id = accepted["session_id"]
        run = env.wait_run(accepted["run_id"])
        if run["status"] != "succeeded":
            raise RuntimeError(f"run {run['run_id']} ended {run['status']}: {run.get('error')}")


def _counted(bodies: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    import litellm

    tokens = [int(litellm.token_counter(model="gpt-4o", messages=b["messages"])) for b in bodies]
    sizes = [len(json.dumps(b)) for b in bodies]
    return tokens, sizes


def run() -> Section:
    from stepwise.attachments import render
    from stepwise.loop import model_call
    from tests.fakes.openai_server import FakeOpenAI

    section = Section("Attachments: a five-turn session starting with a 1 MB image (gpt-4o)")
    env = local()
    image = _image()
    fake = FakeOpenAI()
    saved = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    os.environ.update(OPENAI_BASE_URL=fake.url, OPENAI_API_KEY="sk-bench")
    agent_id = env.create_agent({"name": "bench-attachments", "model": MODEL})
    measured: dict[str, tuple[list[int], list[int]]] = {}
    try:
        for label, strip in (("stripped", True), ("re-sent", False)):
            before = len(fake.bodies)
            original = model_call.render.expand
            model_call.render.expand = functools.partial(render.expand, strip_earlier=strip)  # type: ignore[assignment]
            try:
                _session(agent_id, image)
            finally:
                model_call.render.expand = original  # type: ignore[assignment]
            measured[label] = _counted(fake.bodies[before:])
    finally:
        fake.close()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    stripped, resent = measured["stripped"], measured["re-sent"]
    section.add("image size", len(image), "bytes", "1024×768 PNG")
    section.add("input tokens, 5 turns, later turns stripped", sum(stripped[0]), "tokens", str(stripped[0]))
    section.add("input tokens, 5 turns, image re-sent every turn", sum(resent[0]), "tokens", str(resent[0]))
    section.add("tokens saved by stripping", 100 * (1 - sum(stripped[0]) / sum(resent[0])), "%", digits=0)
    section.add("request bytes, later turns stripped", sum(stripped[1]), "bytes", str(stripped[1]))
    section.add("request bytes, image re-sent every turn", sum(resent[1]), "bytes", str(resent[1]))
    section.details = {
        "tokens": {k: v[0] for k, v in measured.items()},
        "request_bytes": {k: v[1] for k, v in measured.items()},
    }
    return section

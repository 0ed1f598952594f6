"""What `make run` seeds: a demo agent with one custom HTTP tool, served on loopback."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stepwise_local.stack import LocalStack

FORECASTS = {"paris": ("sunny", 21), "london": ("drizzle", 14), "tokyo": ("clear", 18)}


class _WeatherHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            args = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            args = {}
        city = str(args.get("city", "")).strip()
        sky, temp = FORECASTS.get(city.lower(), ("cloudy", 16))
        body = json.dumps({"city": city, "sky": sky, "temperature_c": temp}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_demo_tools(host: str = "127.0.0.1") -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, 0), _WeatherHandler)
    threading.Thread(target=server.serve_forever, daemon=True, name="demo-tools").start()
    return server


def demo_agent(tool_base_url: str) -> dict[str, Any]:
    return {
        "name": "demo",
        "system_prompt": "You are a helpful assistant. Use get_weather for weather questions.",
        "tools": [
            {
                "type": "http",
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "description": "City name", "examples": ["Paris"]}
                    },
                    "required": ["city"],
                },
                "endpoint": f"{tool_base_url}/weather",
                "read_only": True,
            }
        ],
    }


def seed_demo_agent(stack: LocalStack, key: str, tool_base_url: str) -> str:
    """The demo agent's id: created on a fresh stack; on one that remembers, the agent it made before,
    its tool pointed at this start's demo tool server (a new port each start)."""
    wanted = demo_agent(tool_base_url)
    status, _, listed = stack.invoke_api("GET", "/v1/agents", key=key)
    if status != 200:
        raise RuntimeError(f"{status} {listed}")
    existing = next((a for a in listed["agents"] if a["name"] == wanted["name"]), None)
    if existing is None:
        status, _, agent = stack.invoke_api("POST", "/v1/agents", wanted, key=key)
        if status != 201:
            raise RuntimeError(f"{status} {agent}")
        return str(agent["agent_id"])
    agent_id = str(existing["agent_id"])
    (tool,) = wanted["tools"]
    stack.invoke_api("DELETE", f"/v1/agents/{agent_id}/tools/{tool['name']}", key=key)  # 404: removed
    status, _, added = stack.invoke_api("POST", f"/v1/agents/{agent_id}/tools", tool, key=key)
    if status != 201:
        raise RuntimeError(f"{status} {added}")
    return agent_id

"""What `make run` seeds: a demo agent with one custom HTTP tool, served on loopback."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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

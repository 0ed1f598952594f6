"""Runs inside a bare interpreter (`python -I -S probe.py MODE SPEC`) that sees only a function's
code and its layers, the way Lambda's sys.path does (/var/task, then /opt/python). Prints one JSON
object on its last line. Used by packaging/verify.py; stdlib only until the paths are set.

MODE `imports`: import every module of the packages in SPEC["packages"] and report each one's error
(or null), so two trees (untrimmed, trimmed) can be compared module by module.

MODE `smoke`: the model step's life on Lambda under SnapStart, with every socket refused but
loopback (where the fake model server is) and, during init, every socket at all:
  init     import the handler module and `stepwise.core.snapstart.prepare()` (litellm gets imported);
  restore  run the after-restore hooks prepare() registered;
  invoke   model turns through stepwise.llm.client: the scripted model, and an OpenAI-compatible
           fake (text, tool call, rate limit), and litellm's offline token counting.

MODE `loaded`: the file of every module a function loads, for packaging/bytecode.py to compile: the
handler module's import and what its first call imports (`first_call`), and for the model step
(SPEC["model"]) the whole `smoke` run as well.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import ipaddress
import json
import socket
import sys
import time
import types
from pathlib import Path
from typing import Any


class NetGuard:
    """Refuses (and records) every connection and name lookup, except loopback when allowed."""

    def __init__(self) -> None:
        self.allow_loopback = False
        self.attempts: list[str] = []
        self._connect = socket.socket.connect
        self._getaddrinfo = socket.getaddrinfo

    def install(self) -> None:
        guard = self

        def connect(sock: socket.socket, address: Any) -> Any:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and not guard._allowed(address[0]):
                guard.attempts.append(f"connect {address!r}")
                raise ConnectionRefusedError(f"probe: no network ({address!r})")
            return guard._connect(sock, address)

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            if host is not None and not guard._allowed(host):
                guard.attempts.append(f"getaddrinfo {host!r}")
                raise socket.gaierror(f"probe: no network ({host!r})")
            return guard._getaddrinfo(host, *args, **kwargs)

        socket.socket.connect = connect  # type: ignore[method-assign,assignment]
        socket.getaddrinfo = getaddrinfo

    def _allowed(self, host: Any) -> bool:
        if not self.allow_loopback:
            return False
        if host in ("localhost", b"localhost"):
            return True
        try:
            return ipaddress.ip_address(host if isinstance(host, str) else host.decode()).is_loopback
        except ValueError:
            return False


def imports(spec: dict[str, Any]) -> dict[str, Any]:
    results: dict[str, str | None] = {}
    for package in spec["packages"]:
        root = next((Path(p) / package for p in spec["paths"] if (Path(p) / package).is_dir()), None)
        if root is None:
            results[package] = "not found"
            continue
        names = sorted(
            ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
            for path in root.rglob("*.py")
        )
        for name in names:
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    importlib.import_module(name)
                results[name] = None
            except BaseException as exc:  # noqa: BLE001 - SystemExit too: every outcome is recorded
                results[name] = f"{type(exc).__name__}: {exc}"[:300]
    return {"modules": results}


def smoke(spec: dict[str, Any], guard: NetGuard) -> dict[str, Any]:
    out: dict[str, Any] = {}
    hooks: list[Any] = []
    runtime = types.ModuleType("snapshot_restore_py")  # what Lambda's python3.12 runtime provides
    runtime.register_after_restore = lambda func, *a, **k: hooks.append((func, a, k))  # type: ignore[attr-defined]
    runtime.register_before_snapshot = lambda func, *a, **k: None  # type: ignore[attr-defined]
    sys.modules["snapshot_restore_py"] = runtime

    began = time.perf_counter()
    handler = importlib.import_module(spec["handler_module"])
    from stepwise.core import snapstart

    out["hooks_registered"] = snapstart.prepare(handler.warm)  # what the handler's own call found
    out["init_seconds"] = round(time.perf_counter() - began, 2)
    out["litellm_in_snapshot"] = "litellm" in sys.modules
    out["init_network_attempts"] = list(guard.attempts)

    for func, args, kwargs in hooks:
        func(*args, **kwargs)
    out["restore_hooks_run"] = len(hooks)

    guard.allow_loopback = True
    from stepwise.core import errors
    from stepwise.llm.client import complete
    from stepwise.llm.models import ScriptTurn

    hello = [{"role": "user", "content": "hello"}]
    scripted = complete(model="scripted", messages=hello, tools=None, script=[ScriptTurn(text="scripted ok")])
    out["scripted"] = scripted.text
    tool = {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    model = "openai/probe-model"  # the fake server answers in the order verify.py queued
    out["openai_text"] = complete(model=model, messages=hello, tools=[tool]).text
    called = complete(model=model, messages=hello, tools=[tool])
    out["openai_tool_calls"] = [(c.name, c.arguments) for c in called.tool_calls]
    try:
        complete(model=model, messages=hello, tools=None)
        out["rate_limited"] = "no error"
    except errors.RateLimited:
        out["rate_limited"] = "RateLimited"
    import litellm

    out["token_counts"] = {
        m: litellm.token_counter(model=m, messages=hello) for m in ("gpt-4o", "claude-3-5-sonnet-20240620")
    }
    out["network_attempts"] = list(guard.attempts)
    return out


def first_call(handler: types.ModuleType) -> None:
    """What a handler imports on its first call rather than at init: the modules its file names in
    function-local imports, and for the API function every route module of its routes table (loaded per
    resource, on the first request for it). All of it is loaded on Lambda sooner or later, so all of it
    gets bytecode."""
    import ast

    source = Path(str(handler.__file__)).read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = importlib.import_module(node.module)
            for alias in node.names:
                if not hasattr(base, alias.name):  # a submodule, not an attribute
                    importlib.import_module(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
    routes = sys.modules.get("stepwise.api.app")
    if routes is not None:
        routes.build()  # imports every route module and the resolver, as the spec's routes do
    light = sys.modules.get("stepwise.api.light")
    if light is not None:
        light.build()


def loaded(spec: dict[str, Any], guard: NetGuard) -> dict[str, Any]:
    if spec.get("model"):
        smoke(spec, guard)
        first_call(sys.modules[spec["handler_module"]])
    else:
        first_call(importlib.import_module(spec["handler_module"]))
    files = {getattr(module, "__file__", None) for module in list(sys.modules.values())}
    return {"files": sorted(f for f in files if isinstance(f, str))}


def main() -> None:
    mode, spec_text = sys.argv[1], sys.argv[2]
    spec = json.loads(spec_text)
    sys.path[:0] = spec["paths"]  # /var/task first, then the layers' /opt/python
    guard = NetGuard()
    guard.install()
    if mode == "imports":
        result = imports(spec)
    elif mode == "smoke":
        result = smoke(spec, guard)
    else:
        result = loaded(spec, guard)
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()

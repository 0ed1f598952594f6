"""`make package VERIFY=1`: prove on this machine that the trim rules remove nothing the model step runs.

The built layers are aarch64 and cannot run here. The same pinned releases are installed in the
project venv for x86_64, and the rules match paths that are the same on both (they name data
directories and stubs, never platform files), so this copies the model step's distributions out of
the venv by their RECORD files into a tree shaped like the function's /opt/python, applies the same
rules (trim.RULES, trim.SKIP_DISTS) to a second copy, and runs packaging/probe.py in a bare
interpreter (`-I -S`: no site-packages, only that tree, the staged stepwise layer and the function):

1. every module of litellm, huggingface_hub, tiktoken, tokenizers, opentelemetry and google (protobuf)
   is imported in both trees;
   any module that imports untrimmed but not trimmed fails the verification;
2. the trimmed tree runs the model step's init as under SnapStart with all sockets refused (the
   snapshot must not hold a connection), its after-restore hooks, and real model turns through
   litellm against the fake OpenAI server of tests/fakes on loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import trim
from build import ROOT, TEMPLATE, load_module

from stepwise_local.cfn_yaml import load_template

FUNCTION = "StepFunction"
PROBE = Path(__file__).resolve().parent / "probe.py"
# Every module of these is imported with and without the rules (opentelemetry and google: the code rules
# of the core layer).
PACKAGES = ["litellm", "huggingface_hub", "tiktoken", "tokenizers", "opentelemetry", "google"]
PROBE_TIMEOUT = 600  # seconds; importing all of litellm takes about 15 here
LAMBDA_TASK = "/var/task"


def replicate(names: set[str], pins: dict[str, str], dest: Path) -> None:
    """Copy each distribution's files (per its RECORD) from the project venv into `dest`."""
    for name in sorted(names):
        dist = metadata.distribution(name)
        if dist.version != pins[name]:
            sys.exit(f"the venv has {name} {dist.version}, the lock {pins[name]}: run `make` first")
        base = Path(str(dist.locate_file("")))
        for file in dist.files or []:
            if file.parts[0] == ".." or "__pycache__" in file.parts:
                continue  # console scripts outside site-packages; bytecode
            target = dest / file.as_posix()
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(base / file.as_posix(), target)


def remove_dists(names: dict[str, str], tree: Path) -> None:
    """Delete each distribution's files (per its RECORD) from `tree`, and the directories left empty."""
    for name in names:
        files = [tree / f.as_posix() for f in metadata.distribution(name).files or [] if f.parts[0] != ".."]
        for path in files:
            path.unlink(missing_ok=True)
        parents = {parent for path in files for parent in path.parents if tree in parent.parents}
        for directory in sorted(parents, key=lambda p: -len(p.parts)):
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()


def lambda_environment(extra: dict[str, str], function: str = FUNCTION) -> dict[str, str]:
    """A function's environment (the model step's by default) as template.yaml sets it; resource ids
    become dummies."""
    template = load_template(TEMPLATE)
    variables = {
        **template["Globals"]["Function"]["Environment"]["Variables"],
        **template["Resources"][function]["Properties"].get("Environment", {}).get("Variables", {}),
    }
    params = {name: str(p.get("Default", "")) for name, p in template.get("Parameters", {}).items()}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    for name, value in variables.items():
        if isinstance(value, dict) and value.get("Ref") in params:
            env[name] = params[value["Ref"]]
        else:
            env[name] = value if isinstance(value, str) else f"probe-{name.lower()}"
    env.update(
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="probe",
        AWS_SECRET_ACCESS_KEY="probe",
        POWERTOOLS_LOG_LEVEL="WARNING",
        AWS_LAMBDA_INITIALIZATION_TYPE="snap-start",
    )
    env.update(extra)
    return env


def traced_environment(function: str, extra: dict[str, str]) -> dict[str, str]:
    """As in Lambda with active tracing, so the X-Ray SDK's patches load too (packaging/bytecode.py
    measures what loads); its UDP emitter sends to loopback, where nothing listens."""
    return lambda_environment(
        {
            "LAMBDA_TASK_ROOT": LAMBDA_TASK,
            "AWS_LAMBDA_FUNCTION_NAME": function,
            "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
            "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
            **extra,
        },
        function,
    )


@contextlib.contextmanager
def fake_model() -> Iterator[dict[str, str]]:
    """tests/fakes' OpenAI-compatible server on loopback with the replies probe.py's smoke run asks
    for (text, a tool call, a 429), and the environment that points litellm's `openai/` at it."""
    fakes = load_module("stepwise_fake_openai", ROOT / "tests" / "fakes" / "openai_server.py")
    server = fakes.FakeOpenAI()
    try:
        server.text("fake ok")
        server.tool_calls([("lookup", {"q": "x"})])
        server.rate_limited()
        # The key from the environment, as locally: the template's `aws` source would ask Secrets Manager.
        yield {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "sk-probe", "STEPWISE_SECRETS": "env"}
    finally:
        server.close()


def probe(mode: str, spec: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(PROBE), mode, json.dumps(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=PROBE_TIMEOUT,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        sys.exit(f"probe {mode} failed (exit {done.returncode})")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _removed_by_rule(module: str, layers: Any) -> bool:
    path = module.replace(".", "/")
    return any(trim.removed_by(p, layer) for p in (f"{path}.py", f"{path}/__init__.py") for layer in layers)


def run(out: Path) -> int:
    began = time.perf_counter()
    pin = load_module("stepwise_layer_pins", ROOT / "layers" / "pin.py")
    pins = pin.lock_versions()
    names = set().union(*(pin.closure(roots) for roots in pin.LAYERS.values()))
    work = out / "verify"
    shutil.rmtree(work, ignore_errors=True)
    full, trimmed = work / "untrimmed", work / "trimmed"
    replicate(names, pins, full)
    shutil.copytree(full, trimmed, copy_function=os.link)
    for layer in pin.LAYERS:
        trim.trim(trimmed, layer)
    remove_dists(trim.SKIP_DISTS, trimmed)

    stage = out / "stage"
    code = [str(stage / "functions" / FUNCTION), str(stage / "layers" / "StepwiseLayer" / "python")]
    env = lambda_environment({})
    before = probe("imports", {"paths": [*code, str(full)], "packages": PACKAGES}, env)["modules"]
    after = probe("imports", {"paths": [*code, str(trimmed)], "packages": PACKAGES}, env)["modules"]
    importable = [m for m, error in before.items() if error is None]
    # A module a rule removed on purpose is gone; every other one that imported must still import.
    removed = {m for m in importable if m not in after and _removed_by_rule(m, pin.LAYERS)}
    broken = {
        m: after.get(m, "module removed")
        for m in importable
        if m not in removed and (m not in after or after[m])
    }
    print(
        f"verify: {len(importable)} of {len(before)} modules of {', '.join(PACKAGES)} import untrimmed "
        f"(x86_64 copy of the same releases); {len(removed)} of them are removed by the trim rules "
        f"(none is loaded by a function: checked by the build), {len(broken)} of the rest fail trimmed"
    )
    for module, error in sorted(broken.items())[:30]:
        print(f"  {module}: {error}")

    with fake_model() as openai:
        handler = "app"
        smoke = probe(
            "smoke", {"paths": [*code, str(trimmed)], "handler_module": handler}, lambda_environment(openai)
        )
    expected = {
        "hooks_registered": True,
        "litellm_in_snapshot": True,
        "init_network_attempts": [],
        "scripted": "scripted ok",
        "openai_text": "fake ok",
        "openai_tool_calls": [["lookup", {"q": "x"}]],
        "rate_limited": "RateLimited",
        "network_attempts": [],
    }
    wrong = {k: smoke.get(k) for k, v in expected.items() if smoke.get(k) != v}
    print(
        f"verify: model step on the trimmed tree: SnapStart init {smoke['init_seconds']} s with litellm "
        f"imported and no socket opened; {smoke['restore_hooks_run']} after-restore hook(s) ran; scripted, "
        f"text, tool-call and rate-limit turns through litellm; token counts {smoke['token_counts']}"
    )
    for key, value in wrong.items():
        print(f"  {key}: got {value!r}, expected {expected[key]!r}")
    ok = not broken and not wrong
    print(f"verify: {'passed' if ok else 'FAILED'} in {time.perf_counter() - began:.0f} s")
    return 0 if ok else 1

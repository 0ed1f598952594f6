"""A client generated from the spec the API serves, by a generator that knows only the spec
(openapi-python-client, pinned in requirements/main.lock), compiles and works against the local stack:
the proof that /v1/openapi.json describes the API, statuses and error shape included.

The generated client returns the `Error` model for every status the spec declares for a route and, with
`raise_on_unexpected_status`, raises `UnexpectedStatus` for any other: a status the API answers but the
spec leaves out fails here. Its declared errors are turned into typed exceptions by status, as an SDK built
on it would.
"""

from __future__ import annotations

import compileall
import importlib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from stepwise.core import config
from stepwise.core.ids import new_id
from stepwise.store import keys
from stepwise_local.gateway import serve
from stepwise_local.stack import LocalStack

PACKAGE = "stepwise_generated"
GENERATOR = Path(sys.executable).with_name("openapi-python-client")


class GeneratedApiError(Exception):
    """A declared error answer, parsed by the generated client into its `Error` model."""

    def __init__(self, status: int, error: Any, headers: dict[str, str]) -> None:
        super().__init__(f"{status} {error.error.code}: {error.error.message}")
        self.status, self.error, self.headers = status, error, headers


class NotFound(GeneratedApiError):
    pass


class TooManyRequests(GeneratedApiError):
    @property
    def retry_after(self) -> int:
        return int(self.headers["retry-after"])


BY_STATUS: dict[int, type[GeneratedApiError]] = {404: NotFound, 429: TooManyRequests}


@pytest.fixture(scope="module")
def generated(stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The client package, generated from GET /v1/openapi.json and compiled, on sys.path."""
    status, _, document = stack.invoke_api("GET", "/v1/openapi.json")
    assert status == 200
    work = tmp_path_factory.mktemp("generated")
    (work / "openapi.json").write_text(json.dumps(document))
    # No post hooks: the generator would run ruff on its output, which is not what is tested here.
    (work / "config.json").write_text(json.dumps({"post_hooks": [], "package_name_override": PACKAGE}))
    subprocess.run(
        [
            str(GENERATOR),
            "generate",
            "--path=openapi.json",
            "--config=config.json",
            "--meta=none",
            f"--output-path={PACKAGE}",
            "--fail-on-warning",  # a schema it cannot model is a spec bug
        ],
        cwd=work,
        check=True,
        capture_output=True,
    )
    assert compileall.compile_dir(work / PACKAGE, quiet=1), "the generated client does not compile"
    sys.path.insert(0, str(work))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(work))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


@pytest.fixture
def client(stack: LocalStack, generated: ModuleType, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The generated client over HTTP to the local stack, as a tenant of its own with one schedule allowed."""
    key = f"sk-{new_id('key')}"
    keys.store_key(key, new_id("ten"))
    monkeypatch.setenv("STEPWISE_MAX_SCHEDULES", "1")
    config.reset()
    server = serve(stack.gateway, port=0, quiet=True)
    port = int(server.server_address[1])
    module = importlib.import_module(f"{PACKAGE}.client")
    authenticated = module.AuthenticatedClient(
        base_url=f"http://127.0.0.1:{port}", token=key, raise_on_unexpected_status=True
    )
    yield authenticated
    server.shutdown()
    server.server_close()
    monkeypatch.undo()
    config.reset()


def call(operation: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """The operation's parsed success, or its declared error raised as a typed exception."""
    response = operation(*args, **kwargs)
    error_model = importlib.import_module(f"{PACKAGE}.models.error").Error
    if isinstance(response.parsed, error_model):
        status = int(response.status_code)
        kind = BY_STATUS.get(status, GeneratedApiError)
        raise kind(status, response.parsed, {k.lower(): v for k, v in response.headers.items()})
    return response.parsed


def operation(name: str) -> Callable[..., Any]:
    module = importlib.import_module(f"{PACKAGE}.api.{name}")
    detailed: Callable[..., Any] = module.sync_detailed
    return detailed


def test_a_client_generated_from_the_spec_calls_the_api_and_raises_typed_errors(
    client: Any, generated: ModuleType
) -> None:
    models = importlib.import_module(f"{PACKAGE}.models")
    create_agent = operation("agents.create_agent_v1_agents_post")
    create_schedule = operation("schedules.create_schedule_v1_agents_agent_id_schedules_post")
    get_run = operation("runs.get_run_v1_runs_run_id_get")

    agent = call(create_agent, client=client, body=models.AgentCreate(name="generated"))
    body = models.ScheduleCreate(expression="rate(1 hour)", message="tick")
    schedule = call(create_schedule, agent.agent_id, client=client, body=body)
    with pytest.raises(TooManyRequests) as quota:
        call(create_schedule, agent.agent_id, client=client, body=body)
    with pytest.raises(NotFound) as missing:
        call(get_run, "run_01M8ZPZHBHTYJYK5TXE2GFWM4T", client=client)

    assert isinstance(agent, models.Agent) and agent.agent_id.startswith("agt_")
    assert isinstance(schedule, models.Schedule) and schedule.schedule_id
    assert quota.value.error.error.code == "quota_exceeded" and quota.value.retry_after > 0
    # `details` is an object the generated model reads: named fields, and the rest as extra properties.
    assert quota.value.error.error.details.additional_properties == {"quota": "schedules", "limit": 1}
    assert missing.value.error.error.code == "run_not_found"
    assert missing.value.error.error.details.additional_properties == {}

"""code_execute: run the model's Python or JavaScript in the tenant's code sandbox.

Nothing runs in our Lambda: the code goes to the sandbox service named by the tenant's settings
`CODE_SANDBOX_URL` (required) and `CODE_SANDBOX_API_KEY` (optional). The sandbox URL is the tenant's
choice, so the call goes through the SSRF guard like any other tenant-chosen URL.

The sandbox contract (what a sandbox service must implement):

    POST {CODE_SANDBOX_URL}/execute
    Content-Type: application/json
    Authorization: Bearer {CODE_SANDBOX_API_KEY}        (only when the key is set)

    {"language": "python" | "javascript", "code": "...", "timeout_seconds": 1..120}

    200 {"stdout": str, "stderr": str, "exit_code": int, "duration_ms": int, "timed_out"?: bool}

The sandbox enforces `timeout_seconds` itself and answers 200 with `timed_out: true` (and whatever the
code printed) when the code ran out of time: that, a non-zero exit code and an exception's traceback in
stderr are results the model reads, not failures of the tool. Failures of the sandbox itself:
401/403 → `provider_auth`, 429 → `rate_limited`, 5xx or an answer not of the shape above →
`provider_error`, other 4xx → `provider_rejected`, and no answer within `timeout_seconds` plus
TIMEOUT_MARGIN_SECONDS → `timeout`. stdout and stderr are each cut at OUTPUT_LIMIT characters with a
visible marker.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepwise.net.ssrf import AllowHosts
from stepwise.tools.base import ToolResult
from stepwise.tools.builtin import Settings, ToolScope, input_schema
from stepwise.tools.builtin._provider import cap, post_json, setting

NAME = "code_execute"
Language = Literal["python", "javascript"]
MIN_TIMEOUT_SECONDS = 1
MAX_TIMEOUT_SECONDS = 120
DEFAULT_TIMEOUT_SECONDS = 30
# Beyond the code's own timeout: the sandbox's start-up and the network. The sandbox should have
# answered `timed_out` well within it.
TIMEOUT_MARGIN_SECONDS = 5.0
OUTPUT_LIMIT = 20_000  # characters of stdout, and of stderr, kept
URL_SETTING = "CODE_SANDBOX_URL"
KEY_SETTING = "CODE_SANDBOX_API_KEY"
NOT_CONFIGURED = "Code sandbox is not configured"
PROVIDER = "the code sandbox"

DESCRIPTION = (
    "Run Python or JavaScript in an isolated sandbox and read its stdout, stderr and exit code. "
    "Each call starts fresh: nothing persists between calls. Print what you want to see."
)


class Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    language: Language
    code: str = Field(min_length=1, description="The program to run.")
    timeout_seconds: int = Field(
        DEFAULT_TIMEOUT_SECONDS,
        ge=MIN_TIMEOUT_SECONDS,
        le=MAX_TIMEOUT_SECONDS,
        description="How long the code may run.",
    )


INPUT_SCHEMA: dict[str, Any] = input_schema(Arguments)
READ_ONLY = False
EFFECT: Literal["undeclared"] = "undeclared"
KEY_FIELDS: list[str] = []


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SandboxAnswer(BaseModel):
    """The sandbox's 200 answer; unknown fields are ignored."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int
    duration_ms: int | None = None
    timed_out: bool = False


def run(arguments: Arguments, *, scope: ToolScope, settings: Settings, config: Config) -> ToolResult:
    return execute(arguments, settings=settings)


def execute(
    arguments: Arguments,
    *,
    settings: Settings,
    http_timeout: float | None = None,
    allow_hosts: AllowHosts = None,
) -> ToolResult:
    """Send the code to the sandbox. `http_timeout` replaces `timeout_seconds` plus the margin (for
    tests); `allow_hosts` None reads STEPWISE_ALLOW_HOSTS."""
    payload = sandbox_request(arguments)
    answer = call_sandbox(payload, settings=settings, http_timeout=http_timeout, allow_hosts=allow_hosts)
    if isinstance(answer, ToolResult):
        return answer
    return sandbox_result(answer)


def call_sandbox(
    payload: dict[str, Any],
    *,
    settings: Settings,
    http_timeout: float | None = None,
    allow_hosts: AllowHosts = None,
) -> SandboxAnswer | ToolResult:
    """POST a request body (`sandbox_request`'s shape) to the tenant's sandbox: its answer, or the
    failure the model reads (code tools run through here too)."""
    sandbox_url = setting(settings, URL_SETTING)
    if sandbox_url is None:
        return ToolResult.failure("not_configured", NOT_CONFIGURED)
    api_key = setting(settings, KEY_SETTING)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    answer = post_json(
        f"{sandbox_url.rstrip('/')}/execute",
        payload,
        provider=PROVIDER,
        headers=headers,
        timeout=http_timeout or payload["timeout_seconds"] + TIMEOUT_MARGIN_SECONDS,
        allow_hosts=allow_hosts,
    )
    if not answer.ok:
        return answer
    return parse_answer(answer.output)


def parse_answer(answer: Any) -> SandboxAnswer | ToolResult:
    """The sandbox's 200 answer, or the failure for one of another shape."""
    try:
        return SandboxAnswer.model_validate(answer)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        return ToolResult.failure("provider_error", f"{PROVIDER} answered in an unexpected shape: {problems}")


def sandbox_request(arguments: Arguments) -> dict[str, Any]:
    """The sandbox's request body."""
    return {
        "language": arguments.language,
        "code": arguments.code,
        "timeout_seconds": arguments.timeout_seconds,
    }


def sandbox_result(answer: Any) -> ToolResult:
    """The tool's output for the sandbox's 200 answer, streams capped; a malformed answer is a failure."""
    parsed = parse_answer(answer)
    if isinstance(parsed, ToolResult):
        return parsed
    return ToolResult(
        output={
            "stdout": cap(parsed.stdout, OUTPUT_LIMIT),
            "stderr": cap(parsed.stderr, OUTPUT_LIMIT),
            "exit_code": parsed.exit_code,
            "duration_ms": parsed.duration_ms,
            "timed_out": parsed.timed_out,
        }
    )

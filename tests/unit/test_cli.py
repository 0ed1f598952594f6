"""The `stepwise` CLI without a network: argument parsing, where it points, the event display as a pure
function of event dicts, and exit codes against an in-memory API (an httpx MockTransport, no socket)."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from stepwise_cli import main
from stepwise_cli.app import build_parser
from stepwise_cli.client import Target, resolve_target
from stepwise_cli.context import Context
from stepwise_cli.follow import SocketUnavailable, follow
from stepwise_cli.render import Display, Hints, clip, detail_lines, event_lines, summarize_arguments, table
from stepwise_sdk import RetryPolicy

RUN = "run_1"
HINTS = Hints(run_id=RUN)
NO_WAIT = RetryPolicy(initial_delay=0.0)  # the SDK's retries, without the backoff's sleeps


def event(seq: int, kind: str, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "type": kind, "data": data, "at": "2026-01-01T00:00:00Z"}


# --- An in-memory API ---------------------------------------------------------------------------


Reply = tuple[int, Any]


@dataclass
class FakeApi:
    """Routes `METHOD /path` to a reply (or a callable making one) and records every request."""

    routes: dict[str, Reply | Callable[[httpx.Request], Reply]] = field(default_factory=dict)
    requests: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        route = self.routes.get(f"{request.method} {request.url.path}")
        if route is None:
            return httpx.Response(
                404, json={"error": {"code": "route_not_found", "message": "no such route"}}
            )
        status, body = route(request) if callable(route) else route
        return httpx.Response(status, json=body) if body is not None else httpx.Response(status)

    def events(self, *pages: dict[str, Any]) -> Callable[[httpx.Request], Reply]:
        """Event pages served in order, one per poll."""
        queue = list(pages)
        return lambda request: (200, queue.pop(0))


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def cli(api: FakeApi, *argv: str, stdin: str = "") -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--url", "http://stepwise.test", *argv],
        environ={},
        transport=httpx.MockTransport(api),
        retries=NO_WAIT,
        stdin=io.StringIO(stdin),
        stdout=out,
        stderr=err,
    )
    return Outcome(code, out.getvalue(), err.getvalue())


def finished(status: str, **fields: Any) -> dict[str, Any]:
    """A run as `GET /v1/runs/{id}` shows it (the SDK checks the shape)."""
    return {
        "run_id": RUN,
        "agent_id": "agt_1",
        "session_id": "ses_1",
        "user_id": None,
        "status": status,
        "input": "hello",
        "output": None,
        "error": None,
        "steps": 2,
        "max_steps": 10,
        "max_tokens_budget": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, "cached_tokens": 0},
        "tools_executed": [],
        "replay_of": None,
        "metadata": {},
        "attachments": [],
        "attachments_erased_at": None,
        "created_at": "2026-01-01T00:00:00Z",
        "finished_at": "2026-01-01T00:00:05Z",
        "trigger": "api",
        "parent_run_id": None,
        "root_run_id": RUN,
        "depth": 0,
        "children": [],
        "total_usage": {"input_tokens": 10, "output_tokens": 5, "cached_tokens": 0},
        **fields,
    }


# --- Parsing and the target ---------------------------------------------------------------------


def test_common_options_go_before_or_after_the_command() -> None:
    parser = build_parser()

    before = parser.parse_args(["--json", "--url", "http://a", "agents", "list"])
    after = parser.parse_args(["agents", "list", "--json", "--url", "http://a"])

    assert (before.json, before.url, before.key) == (True, "http://a", None)
    assert (after.json, after.url, after.key) == (True, "http://a", None)


def test_no_command_argument_shadows_the_api_key_option() -> None:
    args = build_parser().parse_args(["settings", "put", "EXA_API_KEY", "--key", "sk-real"])

    assert (args.setting, args.key) == ("EXA_API_KEY", "sk-real")


def test_run_follows_unless_told_not_to() -> None:
    parser = build_parser()

    assert parser.parse_args(["run", "agt_1", "hello"]).follow is True
    assert parser.parse_args(["run", "agt_1", "hello", "--no-follow"]).follow is False
    args = parser.parse_args(["run", "agt_1", "hi", "--session", "ses_1", "--max-steps", "3"])
    assert (args.agent_id, args.message, args.session, args.max_steps) == ("agt_1", "hi", "ses_1", 3)


def test_respond_needs_an_output_and_the_tool_call_it_answers(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["respond", "int_1", "--output", "{}"])

    assert exited.value.code == 2
    assert "--tool-call-id" in capsys.readouterr().err


def test_flags_beat_the_environment_which_beats_the_local_defaults() -> None:
    environ = {"STEPWISE_URL": "https://api.example.com/", "STEPWISE_API_KEY": "sk-env"}

    assert resolve_target(None, None, {}) == Target("http://127.0.0.1:3000", "sk-local-dev", False)
    assert resolve_target(None, None, {"PORT": "4000"}).url == "http://127.0.0.1:4000"
    assert resolve_target(None, None, {"STEPWISE_LOCAL_API_KEY": "sk-mine"}).key == "sk-mine"
    assert resolve_target(None, None, environ) == Target("https://api.example.com", "sk-env", False)
    assert resolve_target("http://x:1", "sk-flag", environ) == Target("http://x:1", "sk-flag", True)


# --- Rendering ----------------------------------------------------------------------------------


def test_a_tool_call_line_summarizes_its_arguments_and_a_result_line_truncates() -> None:
    call = event_lines(event(3, "tool_call", tool_name="notify", arguments={"to": "ops", "n": 2}), HINTS)
    result = event_lines(event(4, "tool_result", tool_name="notify", output={"text": "x" * 500}), HINTS)

    assert call == ['  -> notify(to="ops", n=2)']
    assert result[0].startswith('  <- notify: {"text": "xxx') and result[0].endswith("...")
    assert len(result[0]) < 220


def test_a_failed_tool_result_shows_its_error_code_and_message() -> None:
    error = {"code": "http_error", "message": "the endpoint answered 500"}

    lines = event_lines(event(4, "tool_result", tool_name="notify", error=error), HINTS)

    assert lines == ["  <- notify failed: http_error: the endpoint answered 500"]


def test_an_approval_request_shows_its_link_and_the_exact_commands() -> None:
    data = {
        "interaction_id": "int_1",
        "tool_call_id": "call_9",
        "tool_name": "send_email",
        "arguments": {"to": "ceo@example.com"},
        "approval_url": "http://127.0.0.1:3000/v1/approvals/tok",
    }

    lines = event_lines(event(5, "approval_requested", **data), Hints(RUN, "stepwise --url http://h"))

    assert 'approval needed: send_email(to="ceo@example.com")' in lines[0]
    assert "http://127.0.0.1:3000/v1/approvals/tok" in lines[1]
    assert lines[2].endswith(f"approve: stepwise --url http://h approve {RUN} --tool-call call_9")
    assert f"deny {RUN} --tool-call call_9" in lines[3]


def test_a_client_tool_request_shows_the_command_that_answers_it() -> None:
    data = {"interaction_id": "int_2", "tool_call_id": "call_3", "tool_name": "pick", "arguments": {}}

    lines = event_lines(event(5, "client_tool_requested", **data), HINTS)

    assert lines[-1].strip() == "answer:  stepwise respond int_2 --tool-call-id call_3 --output '<json>'"


def test_hook_blocks_failures_and_unknown_events_each_get_a_line() -> None:
    blocked = event(6, "hook_blocked", hook_id="hk_1", event="PreToolUse", tool_name="rm", message="no")
    failed = event(7, "run_failed", error={"code": "model_error", "message": "bad gateway"})

    assert event_lines(blocked, HINTS) == ["  x blocked by hook hk_1 (PreToolUse on rm): no"]
    assert event_lines(failed, HINTS) == ["failed: model_error: bad gateway"]
    assert event_lines(event(8, "something_new", a=1), HINTS) == ['something_new: {"a": 1}']
    assert event_lines(event(9, "step_completed", step=1), HINTS) == []


def test_streamed_text_is_written_as_it_arrives_and_the_answer_is_not_repeated() -> None:
    display = Display(HINTS)
    events = [
        event(1, "step_started", step=1),
        event(2, "chunk", step=1, offset=0, text="The sky "),
        event(3, "chunk", step=1, offset=8, text="is blue.\nIt is warm."),
        event(4, "run_completed", output="The sky is blue.\nIt is warm.", steps=1, usage={}),
    ]

    text = "".join(display.feed(e) for e in events)

    assert text == (
        "step 1\n  The sky is blue.\n  It is warm.\nsucceeded in 1 steps, tokens: 0 in, 0 out, 0 cached\n"
    )
    assert display.finished


def test_text_from_a_retried_step_is_not_written_twice() -> None:
    display = Display(HINTS)
    display.feed(event(1, "chunk", step=1, offset=0, text="Hello"))

    assert display.feed(event(2, "chunk", step=1, offset=0, text="Hel")) == ""
    assert display.feed(event(3, "chunk", step=1, offset=0, text="Hello world")) == " world"


def test_an_answer_that_was_not_streamed_is_printed_with_the_usage() -> None:
    completed = event(9, "run_completed", output="42", steps=3, usage={"input_tokens": 7, "output_tokens": 2})

    assert Display(HINTS).feed(completed) == (
        "answer: 42\nsucceeded in 3 steps, tokens: 7 in, 2 out, 0 cached\n"
    )


def test_helpers_keep_output_on_one_readable_line() -> None:
    assert clip("a\n  b\tc", 10) == "a b c"
    assert clip("x" * 20, 10) == "xxxxxxx..."
    assert summarize_arguments("not an object") == "not an object"
    assert table(["A", "LONG"], [["xyz", "1"], [None, "2"]]) == ["A    LONG", "xyz  1", "-    2"]
    assert detail_lines({"errors": [{"loc": ["body", "name"], "msg": "Field required"}]}) == [
        "body.name: Field required"
    ]


# --- Exit codes ---------------------------------------------------------------------------------


def test_a_followed_run_that_succeeds_exits_0() -> None:
    api = FakeApi()
    api.routes["POST /v1/agents/agt_1/runs"] = (
        202,
        {"run_id": RUN, "session_id": "ses_1", "status": "queued"},
    )
    api.routes[f"GET /v1/runs/{RUN}/events"] = api.events(
        {"events": [event(1, "step_started", step=1)], "next": 1, "done": False},
        {"events": [event(2, "run_completed", output="hi", steps=1, usage={})], "next": 2, "done": True},
    )
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished("succeeded", output="hi"))

    outcome = cli(api, "run", "agt_1", "hello")

    assert outcome.code == 0, outcome.err
    assert "answer: hi" in outcome.out
    polls = [r.url.params for r in api.requests if r.url.path.endswith("/events")]
    assert [(p["after"], p["wait"]) for p in polls] == [("0", "20"), ("1", "20")]
    assert json.loads(api.requests[0].content) == {"message": "hello"}


@pytest.mark.parametrize("status", ["failed", "cancelled", "timed_out"])
def test_a_followed_run_that_does_not_succeed_exits_1_with_its_error(status: str) -> None:
    api = FakeApi()
    error = {"code": status, "message": "it ended"}
    api.routes[f"GET /v1/runs/{RUN}/events"] = (200, {"events": [], "next": 5, "done": True})
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished(status, error=error))

    outcome = cli(api, "runs", "follow", RUN, "--after", "5")

    assert outcome.code == 1
    assert f"{status}: {status}: it ended" in outcome.out


def test_an_api_error_exits_2_with_its_code_and_message_on_stderr() -> None:
    api = FakeApi()
    error = {"code": "validation_error", "message": "the request is not valid"}
    details = [{"loc": ["body", "name"], "msg": "Field required", "type": "missing"}]
    api.routes["POST /v1/agents"] = (422, {"error": {**error, "details": {"errors": details}}})

    human = cli(api, "agents", "create", "--name", "x")
    machine = cli(api, "agents", "create", "--name", "x", "--json")

    assert human.code == machine.code == 2
    assert human.out == machine.out == ""
    assert human.err.splitlines() == [
        "error: validation_error: the request is not valid",
        "  body.name: Field required",
    ]
    assert json.loads(machine.err.splitlines()[1])["error"]["details"] == {"errors": details}


def test_a_non_contract_error_still_names_a_code() -> None:
    api = FakeApi(routes={"GET /v1/agents": (401, {"message": "Unauthorized"})})

    outcome = cli(api, "agents", "list")

    assert (outcome.code, outcome.err) == (2, "error: http_401: Unauthorized\n")


def test_connection_refused_exits_2_with_a_hint_to_start_the_local_stack() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    err = io.StringIO()
    code = main(
        ["agents", "list"],
        environ={},
        transport=httpx.MockTransport(refuse),
        retries=NO_WAIT,
        stdout=io.StringIO(),
        stderr=err,
    )

    assert code == 2
    assert "cannot reach http://127.0.0.1:3000: connection refused" in err.getvalue()
    assert "make run" in err.getvalue()


def test_a_script_file_that_is_not_json_exits_2_before_any_request(tmp_path: Any) -> None:
    script = tmp_path / "script.json"
    script.write_text("[{")
    api = FakeApi()

    outcome = cli(api, "run", "agt_1", "hi", "--script", str(script))

    assert outcome.code == 2 and "is not valid JSON" in outcome.err
    assert api.requests == []


# --- What an agent weighs ----------------------------------------------------------------------


def test_agents_weight_shows_the_first_call_s_tokens_heaviest_tool_first() -> None:
    api = FakeApi()
    weight = {
        "model": "gpt-4o",
        "system_tokens": 120,
        "tools_tokens": 310,
        "first_call_tokens": 437,
        "tools": [{"name": "web_search", "tokens": 200}, {"name": "send_email", "tokens": 95}],
    }
    api.routes["GET /v1/agents/agt_1/weight"] = (200, weight)

    human = cli(api, "agents", "weight", "agt_1")
    machine = cli(api, "agents", "weight", "agt_1", "--json")

    assert human.code == machine.code == 0
    assert human.out.splitlines() == [
        "model          gpt-4o",
        "system prompt  120 tokens",
        "tools          310 tokens (2 declared)",
        "first call     437 tokens before the user's message",
        "",
        "TOOL        TOKENS",
        "web_search  200",
        "send_email  95",
    ]
    assert json.loads(machine.out) == weight


def test_agents_tool_usage_sends_last_and_names_declared_tools_never_called() -> None:
    api = FakeApi()
    usage = {
        "runs": 5,
        "tools": [
            {"name": "web_search", "declared": True, "calls": 7},
            {"name": "send_email", "declared": True, "calls": 0},
            {"name": "old_tool", "declared": False, "calls": 1},
        ],
    }
    api.routes["GET /v1/agents/agt_1/tool-usage"] = (200, usage)

    human = cli(api, "agents", "tool-usage", "agt_1", "--last", "5")
    default = cli(api, "agents", "tool-usage", "agt_1", "--json")

    assert human.code == default.code == 0
    assert [r.url.params.get("last") for r in api.requests] == ["5", None]
    assert human.out.splitlines() == [
        "tool calls over the latest 5 runs",
        "TOOL        DECLARED      CALLS",
        "web_search  yes           7",
        "send_email  yes           0",
        "old_tool    no (removed)  1",
        "never called: send_email (each costs tokens on every call)",
    ]
    assert json.loads(default.out) == usage


# --- Commands that must not leak or repeat ------------------------------------------------------


def test_a_setting_read_from_stdin_is_sent_and_never_printed() -> None:
    api = FakeApi()
    api.routes["PUT /v1/settings/EXA_API_KEY"] = (
        200,
        {"key": "EXA_API_KEY", "updated_at": "2026-01-01T00:00:00Z"},
    )

    human = cli(api, "settings", "put", "EXA_API_KEY", stdin="s3cret-value\n")
    machine = cli(api, "settings", "put", "EXA_API_KEY", "--json", stdin="s3cret-value\n")

    assert human.code == machine.code == 0
    assert [json.loads(r.content) for r in api.requests] == [{"value": "s3cret-value"}] * 2
    assert "s3cret" not in human.out + human.err + machine.out + machine.err
    assert json.loads(machine.out)["key"] == "EXA_API_KEY"


def test_respond_sends_an_idempotency_key_and_reuses_a_given_one() -> None:
    api = FakeApi()
    answered = {
        "interaction_id": "int_1",
        "run_id": RUN,
        "kind": "client_tool",
        "status": "answered",
        "tool_call_id": "call_1",
        "tool_name": "pick",
        "arguments": {},
        "created_at": "2026-01-01T00:00:00Z",
    }
    api.routes["POST /v1/sessions/interactions/int_1/respond"] = (202, answered)

    first = cli(api, "respond", "int_1", "--tool-call-id", "call_1", "--output", '{"choice": "b"}')
    again = cli(
        api,
        "respond",
        "int_1",
        "--tool-call-id",
        "call_1",
        "--output",
        "-",
        "--idempotency-key",
        "k1",
        stdin="7",
    )
    failed = cli(api, "respond", "int_1", "--tool-call-id", "call_1", "--output", '"boom"', "--error")

    assert first.code == again.code == failed.code == 0
    generated, given, _ = (r.headers["idempotency-key"] for r in api.requests)
    assert generated.startswith("cli-") and generated in first.out and given == "k1"
    bodies = [json.loads(r.content)["answer"] for r in api.requests]
    assert bodies == [
        {"tool_call_id": "call_1", "outcome": "completed", "output": {"choice": "b"}},
        {"tool_call_id": "call_1", "outcome": "completed", "output": 7},
        {"tool_call_id": "call_1", "outcome": "error", "output": "boom"},
    ]


def test_an_output_that_is_not_json_is_refused_with_how_to_quote_it() -> None:
    outcome = cli(FakeApi(), "respond", "int_1", "--tool-call-id", "c", "--output", "plain words")

    assert outcome.code == 2 and "--output '\"some text\"'" in outcome.err


def test_an_ambiguous_approval_names_the_waiting_calls() -> None:
    error = {"code": "ambiguous_approval", "message": "several", "details": {"tool_call_ids": ["c1", "c2"]}}
    api = FakeApi(routes={f"POST /v1/runs/{RUN}/approve": (409, {"error": error})})

    outcome = cli(api, "approve", RUN)

    assert outcome.code == 2
    assert '  tool_call_ids: ["c1", "c2"]' in outcome.err
    assert f"approve {RUN} --tool-call ID" in outcome.err


# --- Following survives a dropped long poll -----------------------------------------------------


def test_a_long_poll_is_sent_again_after_a_5xx_from_the_last_seq_shown() -> None:
    replies: list[Reply] = [
        (200, {"events": [event(1, "step_started", step=1)], "next": 1, "done": False}),
        (503, {"message": "Service Unavailable"}),
        (200, {"events": [event(2, "run_completed", output="x")], "next": 2, "done": True}),
    ]
    api = FakeApi(routes={f"GET /v1/runs/{RUN}/events": lambda request: replies.pop(0)})
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished("succeeded", output="x"))

    outcome = cli(api, "runs", "follow", RUN)

    assert outcome.code == 0, outcome.err
    polls = [r.url.params["after"] for r in api.requests if r.url.path.endswith("/events")]
    assert polls == ["0", "1", "1"]
    assert outcome.out.count("step 1") == 1


def test_a_4xx_on_a_long_poll_ends_the_follow_with_its_error() -> None:
    api = FakeApi()
    api.routes[f"GET /v1/runs/{RUN}/events"] = (404, {"error": {"code": "run_not_found", "message": "no"}})

    outcome = cli(api, "runs", "follow", RUN)

    assert (outcome.code, outcome.err) == (2, "error: run_not_found: no\n")
    assert len([r for r in api.requests if r.url.path.endswith("/events")]) == 1


def test_ctrl_c_while_following_says_how_to_resume_from_the_last_event() -> None:
    def interrupted(request: httpx.Request) -> Reply:
        raise KeyboardInterrupt

    api = FakeApi()
    pages = api.events(
        {"events": [event(1, "run_started"), event(2, "step_started", step=1)], "next": 2, "done": False}
    )
    api.routes[f"GET /v1/runs/{RUN}/events"] = lambda r: (
        pages(r) if r.url.params["after"] == "0" else interrupted(r)
    )

    outcome = cli(api, "runs", "follow", RUN)

    assert outcome.code == 130
    assert outcome.err.strip().endswith(
        f"resume with: stepwise --url http://stepwise.test runs follow {RUN} --after 2"
    )


# --- Following over the socket --------------------------------------------------------------------


def follow_with(api: FakeApi, socket: Callable[[str], Any], after: int = 0) -> tuple[int, str]:
    out = io.StringIO()
    ctx = Context(
        args=argparse.Namespace(json=False),
        target=Target("http://stepwise.test", "k", False),
        stdout=out,
        stderr=io.StringIO(),
        stdin=io.StringIO(),
        transport=httpx.MockTransport(api),
        retries=NO_WAIT,
    )
    return follow(ctx, RUN, after, socket=socket), out.getvalue()


def issue_follow_urls(api: FakeApi) -> list[str]:
    """Serves POST …/follow; returns the list the `after` of each request lands in."""
    afters: list[str] = []

    def issue(request: httpx.Request) -> Reply:
        afters.append(request.url.params["after"])
        url = f"ws://sockets.test/live?token=t{len(afters)}"
        return 200, {"url": url, "expires_at": "2026-01-01T00:00:00Z"}

    api.routes[f"POST /v1/runs/{RUN}/follow"] = issue
    return afters


def messages(*events: dict[str, Any]) -> Callable[[str], list[str]]:
    return lambda url: [json.dumps(e) for e in events]


def test_a_run_is_followed_over_the_socket_to_its_terminal_event_without_polling() -> None:
    api = FakeApi()
    afters = issue_follow_urls(api)
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished("succeeded", output="hi"))
    opened: list[str] = []

    def socket(url: str) -> list[str]:
        opened.append(url)
        completed = event(4, "run_completed", output="hi", steps=1)
        return messages(event(3, "step_started", step=1), completed)(url)

    code, out = follow_with(api, socket, after=2)

    assert code == 0 and "answer: hi" in out
    assert afters == ["2"] and opened == ["ws://sockets.test/live?token=t1"]
    assert not [r for r in api.requests if r.url.path.endswith("/events")]


def test_a_socket_that_ends_before_the_terminal_event_hands_over_to_long_polling() -> None:
    api = FakeApi()
    issue_follow_urls(api)
    api.routes[f"GET /v1/runs/{RUN}/events"] = api.events(
        {
            "events": [event(2, "step_started", step=1), event(3, "run_completed", output="x")],
            "next": 3,
            "done": True,
        },
    )
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished("succeeded", output="x"))

    code, out = follow_with(api, messages(event(1, "run_started"), event(2, "step_started", step=1)))

    assert code == 0
    polls = [r.url.params["after"] for r in api.requests if r.url.path.endswith("/events")]
    assert polls == ["2"]  # from the last event the socket delivered
    assert out.count("step 1") == 1  # the event both sides carry is written once


def test_a_socket_that_cannot_be_opened_falls_back_to_long_polling() -> None:
    api = FakeApi()
    issue_follow_urls(api)
    api.routes[f"GET /v1/runs/{RUN}/events"] = api.events(
        {"events": [event(1, "run_completed", output="x")], "next": 1, "done": True}
    )
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished("succeeded", output="x"))

    def unreachable(url: str) -> list[str]:
        raise SocketUnavailable("connection refused")

    code, out = follow_with(api, unreachable)

    assert code == 0 and "answer: x" in out
    assert [r.url.params["after"] for r in api.requests if r.url.path.endswith("/events")] == ["0"]


def test_a_server_without_the_follow_route_is_long_polled() -> None:
    api = FakeApi()  # POST …/follow answers 404 route_not_found
    api.routes[f"GET /v1/runs/{RUN}/events"] = api.events(
        {"events": [event(1, "run_completed", output="x")], "next": 1, "done": True}
    )
    api.routes[f"GET /v1/runs/{RUN}"] = (200, finished("succeeded", output="x"))

    def never(url: str) -> list[str]:
        raise AssertionError("no URL was issued, so no socket may be opened")

    code, _ = follow_with(api, never)

    assert code == 0


def test_runs_list_sends_every_filter_and_repeats_them_for_the_next_page() -> None:
    api = FakeApi()
    api.routes["GET /v1/runs"] = (200, {"runs": [finished("succeeded", user_id="ada")], "next_token": "tok"})

    listed = cli(
        api, "runs", "list", "--user", "ada", "--trigger", "schedule",
        "--after", "2026-12-01T00:00:00Z", "--before", "2026-12-05T00:00:00Z",
    )  # fmt: skip

    assert listed.code == 0, listed.err
    assert dict(api.requests[0].url.params) == {
        "user_id": "ada",
        "trigger": "schedule",
        "created_after": "2026-12-01T00:00:00Z",
        "created_before": "2026-12-05T00:00:00Z",
    }
    assert listed.out.splitlines()[-1].endswith(
        "runs list --user ada --trigger schedule --after 2026-12-01T00:00:00Z"
        " --before 2026-12-05T00:00:00Z --next-token tok"
    )
    with pytest.raises(SystemExit) as refused:  # not a kind of trigger: argparse's usage error
        cli(api, "runs", "list", "--trigger", "cron")
    assert refused.value.code == 2 and len(api.requests) == 1


# --- Effects --------------------------------------------------------------------------------------


EFFECT_KEY = "effect:" + "a" * 64


def test_effects_list_shows_unknown_effects_and_resolve_records_the_outcome() -> None:
    entry = {
        "key": EFFECT_KEY,
        "kind": "effect",
        "status": "unknown",
        "tool": "send",
        "arguments": {"to": "anna@acme.com", "api_token": "********"},
        "run_id": RUN,
        "tool_call_id": "call_1",
        "generation": 1,
        "claimed_at": "2026-01-01T00:00:00Z",
        "settled_at": None,
        "error": {"code": "http_error", "message": "HTTP 502"},
        "resolution": None,
    }
    resolution = {"outcome": "done", "by": "ops", "at": "2026-01-01T01:00:00Z", "note": "seen"}
    resolution["was"] = "unknown"
    api = FakeApi(
        {
            "GET /v1/effects": (200, {"effects": [entry], "next_token": None}),
            f"POST /v1/effects/{EFFECT_KEY}/resolve": (
                200,
                {**entry, "status": "done", "resolution": resolution},
            ),
        }
    )

    listed = cli(api, "effects", "list", "--run", RUN)
    resolved = cli(api, "effects", "resolve", EFFECT_KEY, "done", "--note", "seen")

    assert listed.code == 0 and EFFECT_KEY in listed.out and "anna@acme.com" in listed.out
    assert dict(api.requests[0].url.params) == {"status": "unknown", "run_id": RUN}
    assert resolved.code == 0 and "is done (by ops)" in resolved.out
    assert json.loads(api.requests[1].content) == {"outcome": "done", "note": "seen"}

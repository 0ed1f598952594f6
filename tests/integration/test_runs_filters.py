"""GET /v1/runs filtered by end user, kind of trigger and creation window, as the console asks."""

from datetime import timedelta
from urllib.parse import quote

from stepwise.core.schema import utcnow
from stepwise_local.stack import LocalStack


def test_runs_are_filtered_by_user_trigger_and_window_through_the_query(stack: LocalStack) -> None:
    # Given two runs of one agent, for two end users
    _, _, agent = stack.invoke_api("POST", "/v1/agents", {"name": "filtered"})
    agent_id = agent["agent_id"]
    before = quote((utcnow() - timedelta(seconds=1)).isoformat())
    ada = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "a", "user_id": "ada"})[2]
    bob = stack.invoke_api("POST", f"/v1/agents/{agent_id}/runs", {"message": "b", "user_id": "bob"})[2]
    # (no wait for them to end: a run is listed from the moment its POST is answered)

    def listed(query: str) -> list[str]:
        status, _, body = stack.invoke_api("GET", f"/v1/runs?agent_id={agent_id}&{query}")
        assert status == 200, body
        return [r["run_id"] for r in body["runs"]]

    # Then the query's filters apply, alone and together
    assert listed("user_id=ada") == [ada["run_id"]]
    assert listed("trigger=api") == [bob["run_id"], ada["run_id"]]
    assert listed("trigger=schedule") == []
    assert listed(f"created_after={before}&user_id=bob") == [bob["run_id"]]
    assert listed(f"created_before={before}") == []
    # and a value that cannot be one is refused with the validation error, never read
    for bad in ("trigger=cron", "created_after=yesterday", "user_id=a%20b"):
        status, _, body = stack.invoke_api("GET", f"/v1/runs?{bad}")
        assert status == 422 and body["error"]["code"] == "validation_error", (bad, body)

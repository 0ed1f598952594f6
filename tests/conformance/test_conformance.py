"""The official MCP conformance suite (@modelcontextprotocol/conformance, pinned in package-lock.json and
installed by `make test` with `npm ci`) against Stepwise's MCP client, through tests/conformance/client.py.

Every client scenario of the installed version is classified here: most must pass; the few Stepwise does
not implement must fail exactly for the reason given, so a fix shows up as a failing test to update,
and a new version with scenarios nobody has looked at fails until they are classified.
Scenarios run one at a time: the suite's parallel mode starves sse-retry's timing checks on a busy box.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CLI = HERE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
# Node 22 from the npm registry (the suite needs it); the package for this machine's architecture.
NODE = HERE / "node_modules" / ".bin" / "node"

PASS = "pass"
# The suite's own words: reconnecting "slightly late" is "acceptable but may indicate network delays",
# which on a loaded 2-core machine it does; reconnecting early, or very late, still fails.
TOLERATED = {("client-sse-retry-timing", "WARNING")}
# sse-retry fails a reconnection later than twice the retry field (1 s): a process descheduled that long
# on a 2-core machine running the other test worker beside it says nothing about the client. Such a
# scenario runs again, up to three times, until its clock check passes; any other failure counts at once.
TIMED = {"sse-retry"}
TIMED_CHECKS = {"client-sse-retry-timing"}
TIMED_ATTEMPTS = 3
# Not implemented by Stepwise, with the check that says so.
KNOWN: dict[str, tuple[str, str]] = {
    # Stepwise registers itself (DCR) or uses the tenant's client: it publishes no client ID metadata
    # document, so the suite warns that a URL client_id was not used.
    "auth/basic-cimd": ("cimd-client-id-used", "WARNING"),
    # A run has no person at hand in the middle of a tool call to answer an elicitation.
    "elicitation-sep1034-client-defaults": ("client-elicitation-sep1034-string-default", "FAILURE"),
    # OAuth client credentials (machine to machine): Stepwise acts for a person who consented.
    "auth/client-credentials-jwt": ("client-credentials-jwt-verified", "FAILURE"),
    "auth/client-credentials-basic": ("client-credentials-basic-auth", "FAILURE"),
    # Enterprise-managed authorization (an IdP's ID token exchanged for an ID-JAG, SEP-990): Stepwise has
    # no enterprise IdP session to exchange; it runs the authorization code flow, which this server
    # does not offer in its place.
    "auth/cross-app-access-complete-flow": ("complete-flow-token-exchange", "FAILURE"),
}
EXPECTED = {
    "initialize": PASS,
    "tools_call": PASS,
    "sse-retry": PASS,
    "auth/metadata-default": PASS,
    "auth/metadata-var1": PASS,
    "auth/metadata-var2": PASS,
    "auth/metadata-var3": PASS,
    "auth/scope-from-www-authenticate": PASS,
    "auth/scope-from-scopes-supported": PASS,
    "auth/scope-omitted-when-undefined": PASS,
    "auth/scope-step-up": PASS,
    "auth/scope-retry-limit": PASS,
    "auth/token-endpoint-auth-basic": PASS,
    "auth/token-endpoint-auth-post": PASS,
    "auth/token-endpoint-auth-none": PASS,
    "auth/pre-registration": PASS,
    "auth/2025-03-26-oauth-metadata-backcompat": PASS,
    "auth/2025-03-26-oauth-endpoint-fallback": PASS,
    "auth/resource-mismatch": PASS,
    "auth/offline-access-scope": PASS,
    "auth/offline-access-not-supported": PASS,
    **dict.fromkeys(KNOWN, "known"),
}


def suite(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert NODE.exists() and CLI.exists(), (
        "the MCP conformance suite is not installed: `make test` runs `npm ci --prefix tests/conformance`"
    )
    env = {**os.environ, "PATH": f"{NODE.parent}:{os.environ.get('PATH', '')}"}
    return subprocess.run(
        [str(NODE), str(CLI), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )


def client_scenarios() -> list[str]:
    listing = suite("list", timeout=60).stdout
    section = listing.split("Client scenarios", 1)[1]
    return re.findall(r"^\s+- (\S+)", section, re.MULTILINE)


def test_every_client_scenario_of_the_installed_suite_is_classified() -> None:
    assert sorted(client_scenarios()) == sorted(EXPECTED)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_scenario(scenario: str, tmp_path: Path) -> None:
    command = f"{sys.executable} -m tests.conformance.client"
    for attempt in range(TIMED_ATTEMPTS if scenario in TIMED else 1):
        out = tmp_path / str(attempt)
        run = suite("client", "--command", command, "--scenario", scenario, "-o", str(out))
        checks = _checks(out)
        problems = [(c["id"], c["status"]) for c in checks if c["status"] in ("FAILURE", "WARNING")]
        if not any(check in TIMED_CHECKS for check, status in problems if status == "FAILURE"):
            break
    tmp_path = out
    if EXPECTED[scenario] == PASS:
        tolerated = set(problems) <= TOLERATED
        assert tolerated and (run.returncode == 0 or problems), (
            problems,
            run.stdout[-3000:],
            _stderr(tmp_path),
        )
        assert any(c["status"] == "SUCCESS" for c in checks)
    else:
        assert run.returncode != 0
        assert KNOWN[scenario] in problems, (problems, _stderr(tmp_path))


def _checks(results: Path) -> list[dict[str, Any]]:
    found = list(results.rglob("checks.json"))
    assert len(found) == 1, f"expected one result, found {found}"
    checks: list[dict[str, Any]] = json.loads(found[0].read_text())
    return checks


def _stderr(results: Path) -> str:
    return "\n".join(p.read_text()[-2000:] for p in results.rglob("stderr.txt"))

"""Principle 7: only the model step imports litellm (it costs seconds and hundreds of MB)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The Step function imports litellm lazily, on its first model call; every other function never does.
FUNCTIONS = sorted(p.parent.name for p in (ROOT / "functions").glob("*/app.py") if p.parent.name != "step")

PROBE = """
import json, sys
sys.path.insert(0, {code_dir!r})
import app
print(json.dumps({{"litellm": "litellm" in sys.modules}}))
"""


@pytest.mark.parametrize("function", FUNCTIONS)
def test_no_function_but_the_model_step_imports_litellm(function: str) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(code_dir=str(ROOT / "functions" / function))],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    )
    imported = json.loads(out.stdout.strip().splitlines()[-1])["litellm"]
    assert not imported, f"functions/{function}/app.py imports litellm"

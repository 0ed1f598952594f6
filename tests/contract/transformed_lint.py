"""Lint the template as CloudFormation will see it: after the SAM transform.

`cfn-lint template.yaml` checks the SAM template itself and misses what only exists after the
transform, such as a circular dependency through a generated role (E3004). Runs in the SAM CLI's
environment, which has the translator: `.venv-sam/bin/python tests/contract/transformed_lint.py`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from cfnlint.api import lint_all
from cfnlint.decode import decode
from samtranslator.translator.transform import transform


class NoManagedPolicies:
    """The template names no AWS managed policies by name, so nothing is looked up in IAM."""

    def load(self) -> dict[str, str]:
        return {}


def _local_uris(node: Any) -> None:
    """Local code paths become S3 URIs, as `sam package` would make them."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("CodeUri", "DefinitionUri", "ContentUri") and isinstance(value, str):
                node[key] = "s3://bucket/key"
            else:
                _local_uris(value)
    elif isinstance(node, list):
        for item in node:
            _local_uris(item)


def main(path: str) -> int:
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")  # the translator wants one; no call is made
    template, problems = decode(path)
    if problems:
        print(problems)
        return 1
    template = json.loads(json.dumps(template, default=str))
    _local_uris(template)
    transformed = transform(template, {"AWS::Region": "us-east-1"}, NoManagedPolicies())
    matches = [m for m in lint_all(json.dumps(transformed, default=str)) if m.rule.id.startswith("E")]
    for match in matches:
        print(f"{match.rule.id} {match.message}")
    print(f"transformed template: {len(transformed['Resources'])} resources, {len(matches)} errors")
    return 1 if matches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parents[2] / "template.yaml")))

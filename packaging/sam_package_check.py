"""`sam package`, offline: what `sam deploy --template-file dist/template.json` would upload.

Runs the SAM CLI's own exporter (the code `sam package` and `sam deploy` run) on the packaged
template with an uploader that records instead of calling S3, then checks that every function,
layer and state machine definition points at a built artifact, that the zips go up as they are
(not zipped a second time), and that no local path is left in the exported template.

    .venv-sam/bin/python packaging/sam_package_check.py dist/template.json
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from samcli.lib.package.artifact_exporter import Template
from samcli.lib.package.code_signer import CodeSigner
from samcli.lib.package.s3_uploader import S3Uploader
from samcli.lib.package.uploaders import Uploaders

BUCKET = "stepwise-package-check"
URI_PROPERTIES = {
    "AWS::Serverless::Function": "CodeUri",
    "AWS::Serverless::LayerVersion": "ContentUri",
    "AWS::Serverless::StateMachine": "DefinitionUri",
}


class RecordingUploader(S3Uploader):
    """Takes note of each upload instead of making it."""

    def __init__(self) -> None:  # no S3 client: nothing is sent anywhere
        self.bucket_name = BUCKET
        self.prefix = "stepwise"
        self.kms_key_id = None
        self.force_upload = False
        self.no_progressbar = True
        self._artifact_metadata = None
        self.uploaded: dict[str, str] = {}  # local file -> key

    def upload(self, file_name: str, remote_path: str) -> str:
        key = f"{self.prefix}/{remote_path}"
        self.uploaded[file_name] = key
        return f"s3://{BUCKET}/{key}"

    def to_path_style_s3_url(self, key: str, version: str | None = None) -> str:
        return f"https://s3.amazonaws.com/{BUCKET}/{key}"


def main(path: str) -> int:
    template_path = Path(path).resolve()
    uploader = RecordingUploader()
    exported: dict[str, Any] = Template(
        str(template_path),
        str(template_path.parent),
        Uploaders(uploader, None),  # type: ignore[arg-type]  # no image functions, so no ECR
        CodeSigner(None, None),
    ).export()

    problems = []
    for file_name in uploader.uploaded:
        if not Path(file_name).is_relative_to(template_path.parent):
            problems.append(f"uploads {file_name}, outside {template_path.parent}")
    zips = [f for f in uploader.uploaded if f.endswith(".zip")]
    for name, res in exported["Resources"].items():
        prop = URI_PROPERTIES.get(res["Type"])
        if prop is None:
            continue
        value = res["Properties"].get(prop)
        if not (isinstance(value, str) and value.startswith(f"s3://{BUCKET}/")) and not isinstance(
            value, dict
        ):
            problems.append(f"{name}.{prop} is not an uploaded artifact: {value!r}")
    for file_name in uploader.uploaded:
        if Path(file_name).suffix not in (".zip", ".json"):
            problems.append(f"{file_name} would be uploaded, but is neither a built zip nor an ASL file")
    for problem in problems:
        print(problem)
    print(
        f"sam package (offline): {len(uploader.uploaded)} artifacts would be uploaded as they are "
        f"({len(zips)} zips), {len(problems)} problems"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1]
            if len(sys.argv) > 1
            else str(Path(__file__).resolve().parents[1] / "dist/template.json")
        )
    )

"""Read a CloudFormation/SAM YAML template into plain data.

YAML's short tags (`!Ref X`, `!GetAtt A.B`, `!Sub ...`) become the long JSON forms CloudFormation
itself uses (`{"Ref": "X"}`, `{"Fn::GetAtt": ["A", "B"]}`, `{"Fn::Sub": ...}`), so code that reads
the template (the local stack, the contract tests) handles a single representation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["CfnLoader", "load_template", "loads_template"]

# Short tag -> long form. !Ref and !Condition are not functions, so they have no "Fn::" prefix.
_FUNCTIONS = {
    "Ref": "Ref",
    "Condition": "Condition",
    **{
        name: f"Fn::{name}"
        for name in (
            "And",
            "Base64",
            "Cidr",
            "Equals",
            "FindInMap",
            "GetAtt",
            "GetAZs",
            "If",
            "ImportValue",
            "Join",
            "Length",
            "Not",
            "Or",
            "Select",
            "Split",
            "Sub",
            "ToJsonString",
            "Transform",
        )
    },
}


class CfnLoader(yaml.SafeLoader):
    """SafeLoader plus CloudFormation's short tags, and without YAML 1.1 timestamps.

    CloudFormation reads `AWSTemplateFormatVersion: 2010-09-09` as a string, not a date.
    """

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }


def _construct(loader: yaml.SafeLoader, node: yaml.Node, long_name: str) -> dict[str, Any]:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if long_name == "Fn::GetAtt":
            # "Resource.Attribute"; attribute names may contain dots (Endpoint.Address).
            resource, _, attribute = str(value).partition(".")
            value = [resource, attribute]
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    elif isinstance(node, yaml.MappingNode):
        value = loader.construct_mapping(node, deep=True)
    else:  # pragma: no cover - the three node kinds above are all YAML has
        raise yaml.constructor.ConstructorError(None, None, f"unexpected node {node!r}", node.start_mark)
    return {long_name: value}


def _register(short: str, long_name: str) -> None:
    def constructor(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
        return _construct(loader, node, long_name)

    CfnLoader.add_constructor(f"!{short}", constructor)


for _short, _long in _FUNCTIONS.items():
    _register(_short, _long)


def loads_template(text: str) -> dict[str, Any]:
    """Parse a template's text (YAML or JSON, which is YAML)."""
    data = yaml.load(text, Loader=CfnLoader)  # CfnLoader is a SafeLoader
    if not isinstance(data, dict):
        raise ValueError("a CloudFormation template is a mapping at the top level")
    return data


def load_template(path: str | Path) -> dict[str, Any]:
    """Parse the template at `path`, e.g. the repository's template.yaml."""
    return loads_template(Path(path).read_text(encoding="utf-8"))

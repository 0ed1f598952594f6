"""The environment is read in stepwise.core.config and nowhere else of the code that ships in Lambda.

The code is read as syntax, so a comment or a docstring that names os.environ is not a read. Any
other mention of os.environ or os.getenv is one, aliases and `from os import environ` included. A
write for a library that reads the variable itself is allowed only where ALLOWED_WRITES names it,
with the reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "shared" / "stepwise"
CONFIG = PACKAGE / "core" / "config.py"

READERS = frozenset({"environ", "environb", "getenv", "getenvb"})
WRITERS = frozenset({"setdefault", "update"})  # os.environ.<writer>(...) as a statement

# (file, variable) -> why our code sets it.
ALLOWED_WRITES = {
    ("shared/stepwise/llm/client.py", "LITELLM_LOCAL_MODEL_COST_MAP"): (
        "litellm reads it when imported; the default keeps its model price map off the network"
    ),
}


def shipped() -> list[Path]:
    """stepwise's modules in the Lambda layer, and the handlers (dev/, the local stack and the CLI,
    reads the developer's shell and never ships)."""
    modules = [path for path in sorted(PACKAGE.rglob("*.py")) if path != CONFIG]
    return [*modules, *sorted((ROOT / "functions").rglob("*.py"))]


def _os_names(tree: ast.AST) -> set[str]:
    """The names the `os` module is bound to: `os`, and any `import os as <name>`."""
    aliases = (alias for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names)
    return {"os"} | {alias.asname for alias in aliases if alias.name == "os" and alias.asname}


def _variable(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


@dataclass(frozen=True, order=True)
class Use:
    """One mention of the environment: a read (`os.environ`, `os.getenv`, `from os import environ`)
    or a write (an item set or deleted, `setdefault` or `update` as a statement) of `variable`."""

    line: int
    kind: Literal["read", "write"]
    what: str  # os.environ, os.getenv, ...
    variable: str | None = None  # a write's, when it is named by a literal


def uses(source: str) -> list[Use]:
    """Every mention of the environment in `source`, in line order."""
    tree = ast.parse(source)
    names = _os_names(tree)
    found: list[Use] = []
    written: set[int] = set()  # the os.environ nodes that are a write's target, not a read

    def is_environ(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Attribute)
            and node.attr in READERS
            and isinstance(node.value, ast.Name)
            and node.value.id in names
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [Use(node.lineno, "read", f"os.{a.name}") for a in node.names if a.name in READERS]
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Store | ast.Del)
            and is_environ(node.value)
        ):
            written.add(id(node.value))
            found.append(Use(node.lineno, "write", "os.environ", _variable(node.slice)))
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and node.value.func.attr in WRITERS
            and is_environ(node.value.func.value)
        ):
            written.add(id(node.value.func.value))
            args = node.value.args
            found.append(Use(node.lineno, "write", "os.environ", _variable(args[0]) if args else None))
    for node in ast.walk(tree):
        if is_environ(node) and id(node) not in written:
            assert isinstance(node, ast.Attribute)
            found.append(Use(node.lineno, "read", f"os.{node.attr}"))
    return sorted(found)


def strays(source: str, relative: str) -> list[str]:
    """`relative:line: ...` for each read in `source`, and each write ALLOWED_WRITES does not name."""
    return [
        f"{relative}:{use.line}: reads {use.what}: read it through stepwise.core.config"
        if use.kind == "read"
        else f"{relative}:{use.line}: writes {use.variable or 'the environment'}, not in ALLOWED_WRITES"
        for use in uses(source)
        if use.kind == "read" or (relative, use.variable) not in ALLOWED_WRITES
    ]


def test_no_shipped_module_but_config_reads_the_environment() -> None:
    found = [
        line for path in shipped() for line in strays(path.read_text(), path.relative_to(ROOT).as_posix())
    ]

    assert found == [], "\n".join(found)


def test_every_allowed_write_is_still_made() -> None:
    """An allowance that outlived its write would let the next one in unexplained."""
    for relative, variable in ALLOWED_WRITES:
        writes = {use.variable for use in uses((ROOT / relative).read_text()) if use.kind == "write"}
        assert variable in writes, f"{relative} no longer writes {variable}: drop it from ALLOWED_WRITES"


def test_the_scan_finds_reads_in_code_and_nothing_in_comments_or_docstrings() -> None:
    source = '''
"""A docstring that names os.environ.get("A") is not a read."""
import os
import os as system
from os import getenv

# os.environ["B"] in a comment is not a read either
value = os.environ.get("C")
other = system.environ["D"]
everything = dict(os.environ)
flag = os.getenv("E")
os.environ["F"] = "written"
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
'''

    assert strays(source, "shared/stepwise/llm/client.py") == [
        "shared/stepwise/llm/client.py:5: reads os.getenv: read it through stepwise.core.config",
        "shared/stepwise/llm/client.py:8: reads os.environ: read it through stepwise.core.config",
        "shared/stepwise/llm/client.py:9: reads os.environ: read it through stepwise.core.config",
        "shared/stepwise/llm/client.py:10: reads os.environ: read it through stepwise.core.config",
        "shared/stepwise/llm/client.py:11: reads os.getenv: read it through stepwise.core.config",
        "shared/stepwise/llm/client.py:12: writes F, not in ALLOWED_WRITES",
    ]


def test_an_allowed_write_is_allowed_only_in_its_file() -> None:
    write = 'import os\nos.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")\n'

    assert strays(write, "shared/stepwise/llm/client.py") == []
    assert strays(write, "shared/stepwise/api/app.py") == [
        "shared/stepwise/api/app.py:2: writes LITELLM_LOCAL_MODEL_COST_MAP, not in ALLOWED_WRITES"
    ]


def test_the_scan_covers_the_handlers_and_leaves_out_config_and_the_developer_tools() -> None:
    files = {path.relative_to(ROOT).as_posix() for path in shipped()}

    assert "functions/step/app.py" in files and "shared/stepwise/llm/client.py" in files
    assert "shared/stepwise/core/config.py" not in files
    assert not any(f.startswith("dev/") for f in files)

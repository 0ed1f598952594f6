"""Checks on the staged layers: built for Lambda's platform, and complete.

Nothing here can run the aarch64 code, so the checks read what the files say about themselves:
- every ELF file's header names AArch64 (and is 64-bit little-endian);
- every extension module's file name is tagged for CPython 3.12 on aarch64 (or is abi3);
- every installed wheel's tags (its dist-info/WHEEL) are among those Lambda's python3.12 on arm64
  supports: cp312, abi3 or pure Python, manylinux up to glibc 2.34 (Amazon Linux 2023);
- no bytecode but what packaging/bytecode.py compiles: CPython 3.12's (magic number 3531), hash-based
  and unchecked, in a `__pycache__/` next to its source;
- every requirement of every distribution a function sees (its layers overlaid, as in /opt/python)
  is present in a version that satisfies it, markers evaluated for the Lambda runtime.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.tags import Tag, compatible_tags, cpython_tags, parse_tag
from packaging.utils import canonicalize_name

PYTHON = (3, 12)
GLIBC_MINORS = range(17, 35)  # manylinux_2_17 (manylinux2014) .. manylinux_2_34 (Amazon Linux 2023)
PLATFORMS = ["manylinux2014_aarch64", *(f"manylinux_2_{minor}_aarch64" for minor in GLIBC_MINORS)]
EM_AARCH64 = 183
MAGIC_312 = (3531).to_bytes(2, "little") + b"\r\n"  # importlib.util.MAGIC_NUMBER of every CPython 3.12.x
UNCHECKED_HASH = 0b01  # pyc flags: hash-based, never checked against the source (PEP 552)
EXTENSION = re.compile(r"\.cpython-(\d+)[a-z]*-([a-z0-9_]+-linux-gnu)\.so$")


def supported_tags() -> set[Tag]:
    interpreter = f"cp{PYTHON[0]}{PYTHON[1]}"
    return {
        *cpython_tags(PYTHON, abis=[interpreter, "abi3", "none"], platforms=PLATFORMS),
        *compatible_tags(PYTHON, interpreter=interpreter, platforms=PLATFORMS),
    }


def elf_problem(path: Path) -> str | None:
    """Why an ELF file cannot load on Lambda arm64, or None (also for files that are not ELF)."""
    with path.open("rb") as handle:
        head = handle.read(20)
    if head[:4] != b"\x7fELF":
        return None
    if head[4] != 2 or head[5] != 1:
        return "not a 64-bit little-endian ELF"
    machine = int.from_bytes(head[18:20], "little")
    return None if machine == EM_AARCH64 else f"ELF for machine {machine}, not AArch64 ({EM_AARCH64})"


def bytecode_problem(path: Path) -> str | None:
    """Why Lambda's python3.12 would not use `path` as a module's bytecode as built, or None."""
    if path.parent.name != "__pycache__" or not path.name.endswith(".cpython-312.pyc"):
        return "bytecode from the build machine's Python (not __pycache__/*.cpython-312.pyc)"
    with path.open("rb") as handle:
        head = handle.read(8)
    if head[:4] != MAGIC_312:
        return f"bytecode with magic {head[:4].hex()}, not CPython 3.12's"
    if int.from_bytes(head[4:8], "little") != UNCHECKED_HASH:
        return "bytecode that is not hash-based and unchecked (a timestamp pyc would be stale in a zip)"
    source = path.parent.parent / (path.name.removesuffix(".cpython-312.pyc") + ".py")
    if not source.is_file():
        return "bytecode without its source"
    return None


def platform_problems(root: Path) -> list[str]:
    """Everything under `root` (a layer's python/) that Lambda's python3.12 on arm64 could not use."""
    problems = []
    tags = supported_tags()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if path.suffix == ".pyc" or "__pycache__" in path.parts:
            if why := bytecode_problem(path):
                problems.append(f"{rel}: {why}")
            continue
        if why := elf_problem(path):
            problems.append(f"{rel}: {why}")
        ext = EXTENSION.search(path.name)
        if ext and ext.groups() != ("312", "aarch64-linux-gnu"):
            problems.append(f"{rel}: extension built for cpython-{ext.group(1)} on {ext.group(2)}")
        if path.name == "WHEEL" and path.parent.name.endswith(".dist-info"):
            # A wheel installs where any one of its tags (each line may be a compressed set) is supported.
            declared = [
                line.split(":", 1)[1].strip()
                for line in path.read_text().splitlines()
                if line.startswith("Tag:")
            ]
            if not any(parse_tag(tag) & tags for tag in declared):
                problems.append(f"{rel}: no wheel tag of {declared} is supported on python3.12 arm64")
    return problems


def _applies(req: Requirement, extras: Iterable[str], env: dict[str, str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**env, "extra": extra}) for extra in (*extras, ""))


def closure_problems(
    roots: list[Path], extras: dict[str, tuple[str, ...]], optional: set[str], env: dict[str, str]
) -> list[str]:
    """Requirements not met by the distributions in `roots` overlaid (a function's layers).

    `extras` are the extras each root requirement asked for (e.g. powertools[tracer]); `optional`
    names distributions left out on purpose (trim.SKIP_DISTS); `env` is the Lambda runtime's
    marker environment (layers/pin.py's LAMBDA_ENV).
    """
    installed = {
        canonicalize_name(dist.metadata["Name"]): dist
        for dist in metadata.distributions(path=[str(root) for root in roots])
    }
    problems = []
    for name, dist in sorted(installed.items()):
        for spec in dist.requires or []:
            req = Requirement(spec)
            if not _applies(req, extras.get(name, ()), env):
                continue
            wanted = canonicalize_name(req.name)
            if wanted in optional:
                continue
            have = installed.get(wanted)
            if have is None:
                problems.append(f"{name} requires {req}, which no layer of the function has")
            elif not req.specifier.contains(have.version, prereleases=True):
                problems.append(f"{name} requires {req}, but {wanted} {have.version} is installed")
    return problems

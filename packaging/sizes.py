"""Sizes of the built artifacts, measured from the zips themselves, against Lambda's limits.

Lambda checks a function's code and all its layers together: their unzipped sizes (the sum of the
archives' uncompressed file sizes) must stay under 262,144,000 bytes (250 MiB). Zipped, an upload
through S3 (what `sam deploy` does) has no separate limit for functions and layers under that.

Standalone on purpose (stdlib only): bench/package_sizes.py loads it by path.

    .venv/bin/python packaging/sizes.py [dist]   # print the report of an existing build
"""

from __future__ import annotations

import json
import sys
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

LIMIT = 262_144_000  # bytes: function + its layers, unzipped
MANIFEST = "manifest.json"
MIB = 1024 * 1024


@dataclass(frozen=True)
class Artifact:
    name: str
    path: str  # relative to the dist directory
    zipped: int  # bytes of the .zip file
    unzipped: int  # bytes once extracted, as Lambda counts them
    files: int


@dataclass
class FunctionTotal:
    name: str
    layers: list[str]
    unzipped: int  # the function's own code plus every layer it carries
    zipped: int

    @property
    def headroom(self) -> int:
        return LIMIT - self.unzipped

    @property
    def fits(self) -> bool:
        return self.unzipped < LIMIT


@dataclass
class Report:
    layers: dict[str, Artifact] = field(default_factory=dict)
    functions: dict[str, Artifact] = field(default_factory=dict)
    totals: dict[str, FunctionTotal] = field(default_factory=dict)

    @property
    def over(self) -> list[str]:
        return [name for name, total in self.totals.items() if not total.fits]

    def as_json(self) -> dict[str, object]:
        return {
            "limit": LIMIT,
            "layers": {n: asdict(a) for n, a in self.layers.items()},
            "functions": {n: asdict(a) for n, a in self.functions.items()},
            "totals": {
                n: {**asdict(t), "headroom": t.headroom, "fits": t.fits} for n, t in self.totals.items()
            },
        }


def measure(dist: Path, relpath: str, name: str) -> Artifact:
    with zipfile.ZipFile(dist / relpath) as archive:
        entries = [i for i in archive.infolist() if not i.is_dir()]
    return Artifact(
        name=name,
        path=relpath,
        zipped=(dist / relpath).stat().st_size,
        unzipped=sum(i.file_size for i in entries),
        files=len(entries),
    )


def report(dist: Path) -> Report:
    """Measure every artifact the manifest of a build in `dist` names."""
    manifest = json.loads((dist / MANIFEST).read_text())
    out = Report()
    for name, relpath in manifest["layers"].items():
        out.layers[name] = measure(dist, relpath, name)
    for name, spec in manifest["functions"].items():
        own = out.functions[name] = measure(dist, spec["zip"], name)
        layers = [out.layers[layer] for layer in spec["layers"]]
        out.totals[name] = FunctionTotal(
            name=name,
            layers=spec["layers"],
            unzipped=own.unzipped + sum(layer.unzipped for layer in layers),
            zipped=own.zipped + sum(layer.zipped for layer in layers),
        )
    return out


def human(n: int) -> str:
    return f"{n / MIB:.1f} MiB" if abs(n) >= MIB else f"{n / 1024:.1f} KiB"


def render(rep: Report) -> str:
    lines = [f"{'artifact':<34} {'zipped':>11} {'unzipped':>11} {'files':>7}"]
    for kind, group in (("layer", rep.layers), ("function", rep.functions)):
        for name, a in group.items():
            lines.append(
                f"{kind + ' ' + name:<34} {human(a.zipped):>11} {human(a.unzipped):>11} {a.files:>7}"
            )
    lines += ["", f"{'function + its layers':<34} {'unzipped':>11} {'limit':>11} {'headroom':>11}"]
    for name, t in sorted(rep.totals.items(), key=lambda item: -item[1].unzipped):
        verdict = "ok" if t.fits else "OVER"
        lines.append(
            f"{name:<34} {human(t.unzipped):>11} {human(LIMIT):>11} {human(t.headroom):>11}  {verdict}"
            f"  ({' + '.join(t.layers)})"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "dist"
    built = report(target)
    print(render(built))
    sys.exit(1 if built.over else 0)

"""The web console's page weight: the bytes of HTML, JavaScript and CSS a browser loads for
GET /v1/console, found by following the page's references and the modules' imports (what is in the
package but never loaded does not count). Raw, as API Gateway sends it (an HTTP API does not compress),
and gzipped for comparison.

    .venv/bin/python -m bench.console_weight
"""

from __future__ import annotations

import gzip
import re

from bench.harness import Section
from stepwise.console import assets

# The page names its files relative to /v1/console (console/app.js); modules import each other as ./x.js.
_PAGE_REFS = re.compile(r'(?:src|href)="console/([^"]+)"')
_IMPORTS = re.compile(r'(?:from|import)\s*"\./([^"]+)"')


def loaded() -> list[assets.Asset]:
    """The page, then every file it loads, each once."""
    page = assets.page()
    found = [page]
    queue = _PAGE_REFS.findall(page.body)
    seen: set[str] = set()
    while queue:
        name = queue.pop(0)
        if name in seen:
            continue
        seen.add(name)
        asset = assets.asset(name)
        if asset is None:
            raise RuntimeError(f"the console loads {name}, which it does not serve")
        found.append(asset)
        if name.endswith(".js"):
            queue += _IMPORTS.findall(asset.body)
    return found


def run() -> Section:
    files = loaded()
    section = Section("Web console page weight (GET /v1/console and what it loads)")
    by_kind: dict[str, int] = {}
    for asset in files:
        kind = asset.name.rsplit(".", 1)[-1]
        by_kind[kind] = by_kind.get(kind, 0) + asset.size
    total = sum(by_kind.values())
    zipped = sum(len(gzip.compress(a.body.encode(), 9)) for a in files)
    section.add("total (HTML + JS + CSS)", total / 1024, "KiB", f"{total} bytes in {len(files)} files", 1)
    for kind in ("html", "js", "css"):
        section.add(f"  {kind}", by_kind.get(kind, 0) / 1024, "KiB", digits=1)
    section.add("total, gzipped per file", zipped / 1024, "KiB", f"{zipped} bytes", 1)
    section.details = {
        "bytes": total,
        "gzip_bytes": zipped,
        "files": {a.name: a.size for a in files},
    }
    return section


if __name__ == "__main__":
    result = run()
    for figure in result.figures:
        print(f"{figure.name:<28} {figure.shown():>8} {figure.unit}  {figure.note}")

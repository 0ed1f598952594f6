"""The console's files, read once from the package (they ship in the stepwise layer with the code), and
the headers every one of them is served with."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

INDEX = "index.html"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
# Scripts and styles only from our own files (no inline code: everything the page shows is data put in
# with textContent), API calls only to this origin (the timeline long-polls /events rather than opening
# the follow WebSocket, whose wss:// host in AWS is another origin), and nothing may frame the page.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    # The page and its modules change together at a deploy: a browser asks again each time (a matching
    # ETag costs a 304 and no body), so an old page never runs with new modules.
    "Cache-Control": "no-cache",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Robots-Tag": "noindex, nofollow",
}


@dataclass(frozen=True)
class Asset:
    name: str
    body: str
    content_type: str

    @property
    def size(self) -> int:
        return len(self.body.encode())

    @property
    def etag(self) -> str:
        return '"' + hashlib.sha256(self.body.encode()).hexdigest()[:32] + '"'


@cache
def files() -> dict[str, Asset]:
    """Every file of the console by name (flat: the page's modules import each other as ./name.js)."""
    static = resources.files("stepwise.console") / "static"
    found: dict[str, Asset] = {}
    for entry in static.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in MEDIA_TYPES:
            found[entry.name] = Asset(entry.name, entry.read_text(encoding="utf-8"), MEDIA_TYPES[suffix])
    if INDEX not in found:
        raise RuntimeError(f"the console's {INDEX} is missing from the package")
    return found


def page() -> Asset:
    return files()[INDEX]


def asset(name: str) -> Asset | None:
    """A file under /v1/console/, or None. The page itself has one address, /v1/console."""
    if name == INDEX:
        return None
    return files().get(name)

"""Route modules loaded on first use, per resource, with Powertools' resolver still doing the routing.

Importing every route module costs the API function most of a second of cold start (each drags in its
resource's pydantic models and services, some the MCP SDK or the database tools). A request needs one
resource's routes. So the API's table (stepwise.api.app.ROUTES) names each route module with the path
globs it answers, and nothing else: no import. A request's path picks the modules whose globs match it;
those modules are imported and included in a resolver of their own (built once per set, cached), and
that resolver routes the request exactly as it would with every module included. A path no glob
matches, and the spec's own routes, go to the resolver with every module (the `full` one), so a module
missing from the globs is slower, never wrong; tests/contract/test_lazy_routes.py fails when any route
of the spec is not picked by its own module's globs alone.

Globs: `*` is one path segment, a final `**` is that prefix itself or anything below it.
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_lambda_powertools.event_handler import APIGatewayHttpResolver

PACKAGE = "stepwise.api"


def _compile(glob: str) -> re.Pattern[str]:
    if glob.endswith("/**"):
        head = glob[: -len("/**")]
        return re.compile(_segments(head) + "(?:/.*)?")
    return re.compile(_segments(glob))


def _segments(glob: str) -> str:
    return "/".join("[^/]+" if part == "*" else re.escape(part) for part in glob.split("/"))


@dataclass(frozen=True)
class Routes:
    """One route module (`stepwise.api.<module>`), the routers it defines, the paths they answer."""

    module: str
    paths: tuple[str, ...]
    routers: tuple[str, ...] = ("router",)
    patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", tuple(_compile(p) for p in self.paths))

    def answers(self, path: str) -> bool:
        return any(p.fullmatch(path) for p in self.patterns)

    def include(self, app: APIGatewayHttpResolver) -> None:
        loaded = importlib.import_module(f"{PACKAGE}.{self.module}")
        for name in self.routers:
            app.include_router(getattr(loaded, name))


def routes(module: str, *paths: str, routers: tuple[str, ...] = ("router",)) -> Routes:
    """A line of a routes table: the module's name under stepwise.api and its path globs."""
    return Routes(module, paths, routers)


class LazyRoutes:
    """Resolvers built on demand from a routes table (see the module's docstring).

    `finish` adds what only the full resolver has (the spec's routes); `new` makes an empty resolver
    (the local stack swaps in its per-thread class). Resolvers are built under a lock: the local stack
    serves requests on threads, and a resolver must be complete before any thread routes through it.
    """

    def __init__(
        self,
        table: Iterable[Routes],
        new: Callable[[], APIGatewayHttpResolver],
        finish: Callable[[APIGatewayHttpResolver], None] = lambda app: None,
    ) -> None:
        self.table = tuple(table)
        self._new = new
        self._finish = finish
        self._built: dict[tuple[str, ...], APIGatewayHttpResolver] = {}
        self._lock = threading.Lock()

    def picks(self, path: str) -> tuple[str, ...]:
        """The modules whose routes a request for `path` may need, in table order; () for the full set."""
        return tuple(r.module for r in self.table if r.answers(path))

    def full(self) -> APIGatewayHttpResolver:
        return self._resolver(())

    def for_event(self, event: dict[str, Any]) -> APIGatewayHttpResolver:
        return self._resolver(self.picks(str(event.get("rawPath") or "")))

    def built(self) -> list[APIGatewayHttpResolver]:
        with self._lock:
            return list(self._built.values())

    def _resolver(self, modules: tuple[str, ...]) -> APIGatewayHttpResolver:
        app = self._built.get(modules)
        if app is not None:
            return app
        with self._lock:
            app = self._built.get(modules)
            if app is None:
                app = self._new()
                for line in self.table:
                    if not modules or line.module in modules:
                        line.include(app)
                if not modules:
                    self._finish(app)
                self._built[modules] = app
            return app

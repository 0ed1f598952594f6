"""The API's resolvers made safe for the local stack's threads.

Powertools keeps the request being resolved on the `BaseRouter` class (`current_event`,
`lambda_context`) and the resolver (`context`: the matched route and its arguments), and builds each
route's middleware stack on the route's first call. In Lambda one execution environment serves one
request at a time, so that is safe, and production uses the resolver as Powertools ships it. The local
stack serves concurrent requests on threads of one process, where two requests would read each
other's event (another tenant, path or body) and two first calls of a route would wrap its middleware
twice, for good. So when the stack starts, each resolver our functions build becomes a
`PerThreadResolver`: each thread has its own request (a thread is one execution environment), shared
by every resolver and router in it (the events router is included in the API's resolver and in the
light one), and a route's stack is built once under a lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, cast

from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder, Route

from stepwise.api.resolver import Resolver


class _Request(threading.local):
    """The request a thread is resolving: what Powertools keeps on the BaseRouter class and the resolver."""

    def __init__(self) -> None:
        self.event: Any = None
        self.lambda_context: Any = None
        self.context: dict[str, Any] = {}


_request = _Request()


class PerThreadResolver(Resolver):
    """Powertools' HTTP API resolver with its per-request state kept per thread (see above)."""

    _build_lock = threading.Lock()

    @property
    def current_event(self) -> Any:
        return _request.event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        _request.event = value

    @property
    def lambda_context(self) -> Any:
        return _request.lambda_context

    @lambda_context.setter
    def lambda_context(self, value: Any) -> None:
        _request.lambda_context = value

    @property
    def context(self) -> dict[str, Any]:
        return _request.context

    @context.setter
    def context(self, value: dict[str, Any]) -> None:
        _request.context = value

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        # Saved and restored: a handler that invokes another function in process (the local stack runs
        # a synchronous invoke on the caller's thread) gets its own request back afterwards.
        saved = (_request.event, _request.lambda_context, _request.context)
        _request.event, _request.lambda_context, _request.context = (
            self._to_proxy_event(cast(dict[str, Any], event)),
            context,
            {},
        )
        try:
            return super().resolve(event, context)  # also sets the class-wide copies, which nothing reads
        finally:
            _request.event, _request.lambda_context, _request.context = saved

    def _call_route(self, route: Route, route_arguments: dict[str, str]) -> ResponseBuilder[Any]:
        if not route._middleware_stack_built:
            with self._build_lock:
                if not route._middleware_stack_built:
                    route._build_middleware_stack(router_middlewares=self._router_middlewares, app=self)
        return super()._call_route(route, route_arguments)


def per_thread() -> None:
    """Make the resolvers of the API and the light events function per thread (before serving): the
    ones already built, and every one built later (the API builds one per set of route modules, on the
    first request for them: stepwise.api.routing)."""
    from stepwise.api import app, light, resolver

    resolver.resolver_class = PerThreadResolver
    for built in [*app.API.built(), light.build()]:
        if not isinstance(built, PerThreadResolver):
            # Same layout, only properties and two overrides added: the instance keeps its routes.
            built.__class__ = PerThreadResolver

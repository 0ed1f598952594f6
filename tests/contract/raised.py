"""Which of our named errors a route's code can raise, read from its bytecode.

From the route's function, every name it loads that resolves to one of our functions (a module's
function, a class's method, a closure's function, a nested function) is followed, recursively; every name
that resolves to an `ApiError` subclass (or a table of them, such as the sync run's failure map) is an
error the route can answer, unless the name is only there to be caught (`except NotFound:`,
`contextlib.suppress(NotFound)`).

The ports are followed to their production stores: `stores().runs.create` is `stepwise.store.runs.create`
(stepwise.store.wiring), also through a local (`store = stores()`). What it cannot see: calls through
objects built at run time, an error class held in a variable. So it is a floor: the spec must declare
at least what it finds; a route may declare more.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import inspect
import types
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from stepwise.core.errors import ApiError
from stepwise.runs import ports

OURS = "stepwise."
# Opcodes that only load or combine names on the way to an `except` clause's match.
_LOADS = {"LOAD_GLOBAL", "LOAD_ATTR", "LOAD_DEREF", "LOAD_FAST", "LOAD_NAME", "BUILD_TUPLE", "LOAD_CONST"}


@dataclass(frozen=True)
class Raised:
    error: type[ApiError]
    via: tuple[str, ...]  # the call chain from the route to the raise, for the failure message


def _ours(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "") or "").startswith(OURS)


def _unwrap(obj: Any) -> Any:
    while True:
        if isinstance(obj, staticmethod | classmethod | types.MethodType):
            obj = obj.__func__
        elif hasattr(obj, "__wrapped__"):  # functools.cache, wraps
            obj = obj.__wrapped__
        else:
            return obj


def _errors_in(obj: Any) -> list[type[ApiError]]:
    if isinstance(obj, type) and issubclass(obj, ApiError):
        return [obj]
    if isinstance(obj, dict):
        return [v for v in obj.values() if isinstance(v, type) and issubclass(v, ApiError)]
    if isinstance(obj, list | tuple | set | frozenset):
        return [v for v in obj if isinstance(v, type) and issubclass(v, ApiError)]
    return []


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _caught(instructions: list[dis.Instruction], index: int) -> bool:
    """Whether the name loaded at `index` only feeds an `except` clause's match."""
    for later in instructions[index + 1 :]:
        if later.opname == "CHECK_EXC_MATCH":
            return True
        if later.opname not in _LOADS:
            return False
    return False


@cache
def _production_stores() -> Any:
    from stepwise.store import wiring

    return wiring.dynamodb()


# Between `stores` and the attribute read on what it returns, only the call itself.
_CALLING = {"PUSH_NULL", "CALL", "PRECALL", "CACHE", "NOP"}


def _references(func: types.FunctionType) -> Iterator[tuple[Any, bool]]:
    """(object, only caught) for every name the function loads that resolves to an object."""
    cells: dict[str, Any] = {}
    for name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=False):
        try:
            cells[name] = cell.cell_contents
        except ValueError:  # an empty cell
            continue
    for code in _codes(func.__code__):
        instructions = list(dis.get_instructions(code))
        current: Any = None
        # `store = stores()` then `store.runs.create(...)`: a local that holds something worth following.
        local: dict[str, Any] = {}
        suppressing = False
        for index, ins in enumerate(instructions):
            resolved: Any = None
            if ins.opname == "STORE_FAST" and current is not None:
                local[str(ins.argval)] = current
            if ins.opname == "LOAD_FAST":
                resolved = local.get(str(ins.argval))
            elif ins.opname in {"LOAD_GLOBAL", "LOAD_NAME"}:
                name = str(ins.argval)
                resolved = func.__globals__.get(name, getattr(builtins, name, None))
            elif ins.opname == "LOAD_DEREF":
                resolved = cells.get(str(ins.argval))
            elif ins.opname in {"LOAD_ATTR", "LOAD_METHOD"} and current is not None:
                resolved = inspect.getattr_static(current, str(ins.argval), None)
                if resolved is not None and not isinstance(resolved, staticmethod | classmethod):
                    resolved = getattr(current, str(ins.argval), resolved)
            if ins.opname in _CALLING and current is _production_stores():
                continue  # `stores()`: the attribute read next is on the Stores it returns
            if resolved is contextlib.suppress:
                suppressing = True  # its arguments, up to the call, are caught
            elif ins.opname == "CALL":
                suppressing = False
            if resolved is not None:
                yield resolved, suppressing or _caught(instructions, index)
            if resolved is ports.stores:
                current = _production_stores()
            elif isinstance(resolved, types.ModuleType | type) or resolved is _production_stores():
                current = resolved  # worth following through attributes
            else:
                current = None


# A catch-all is cleanup or logging on the way out (`except BaseException: erase(); raise`), not an
# answer: what it catches still counts.
_CATCH_ALL = (BaseException, Exception)


def _caught_types(obj: Any) -> list[type[BaseException]]:
    candidates = obj if isinstance(obj, tuple) else (obj,)
    return [
        v for v in candidates if isinstance(v, type) and issubclass(v, BaseException) and v not in _CATCH_ALL
    ]


@dataclass(frozen=True)
class _Direct:
    errors: tuple[type[ApiError], ...]  # raised (or built to be raised) by the function itself
    catches: tuple[type[BaseException], ...]  # named in its `except` clauses
    calls: tuple[types.FunctionType, ...]  # our functions it calls


@cache
def _direct(func: types.FunctionType) -> _Direct:
    errors: list[type[ApiError]] = []
    catches: list[type[BaseException]] = []
    calls: list[types.FunctionType] = []
    for obj, caught in _references(func):
        if caught:
            catches.extend(_caught_types(obj))
            continue
        found = _errors_in(obj)
        if found:
            errors.extend(found)
            continue
        target = _unwrap(obj)
        if isinstance(target, type) and _ours(target):
            init = target.__dict__.get("__init__")
            target = init if isinstance(init, types.FunctionType) else None
        if isinstance(target, types.FunctionType) and _ours(target):
            calls.append(target)
    return _Direct(tuple(dict.fromkeys(errors)), tuple(dict.fromkeys(catches)), tuple(dict.fromkeys(calls)))


def raised_by(route_function: Any) -> list[Raised]:
    """Every ApiError the function can raise, each with a call chain to it. An error its callees raise
    is dropped where a caller on the way names its class (or a base) in an `except` clause: it is
    handled there (turned into another error, or into an answer), wherever in the function that is."""
    return list(_raised(_unwrap(route_function), frozenset()).values())


def _raised(func: types.FunctionType, visiting: frozenset[Any]) -> dict[type[ApiError], Raised]:
    name = _name(func)
    direct = _direct(func)
    found = {error: Raised(error, (name,)) for error in direct.errors}
    for callee in direct.calls:
        if callee in visiting or callee is func:
            continue  # recursion: what it raises is found on the way in
        for error, raised in _memo(callee, visiting | {func}).items():
            if error in found or (direct.catches and issubclass(error, direct.catches)):
                continue
            found[error] = Raised(error, (name, *raised.via))
    return found


_MEMO: dict[types.FunctionType, dict[type[ApiError], Raised]] = {}


def _memo(func: types.FunctionType, visiting: frozenset[Any]) -> dict[type[ApiError], Raised]:
    if func not in _MEMO:
        _MEMO[func] = _raised(func, visiting)
    return _MEMO[func]


def _name(func: types.FunctionType) -> str:
    return f"{func.__module__}.{func.__qualname__}"

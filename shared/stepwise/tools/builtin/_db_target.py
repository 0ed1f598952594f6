"""Where a DATABASE_URL may point, and the guard on the connection to it.

A tenant's DATABASE_URL is an outbound destination like any URL a tenant picks, so it goes through the
one SSRF guard (`stepwise.ssrf`):

- PostgreSQL (psycopg 3): the host is resolved once per new connection, every address is checked
  (`resolve_checked`, with STEPWISE_ALLOW_HOSTS as the only exemption, as for every outbound path),
  and libpq is handed the checked addresses as `hostaddr`, so it connects to them without a second DNS
  lookup while `host` still names the server for TLS verification. Unix sockets, several hosts and the
  libpq parameters that choose another destination or read local files (`host`, `hostaddr`, `port`,
  `service`, `passfile`, `sslkey`, ...) are refused; only the parameters in `_PG_PARAMETERS` pass.
- Aurora through the RDS Data API (`postgresql+auroradataapi`) opens no socket to a tenant's host: it
  calls the AWS API with the function's own role, which the template scopes.
- SQLite opens a file of the function, so it is only allowed under a per-tenant directory:
  `$STEPWISE_SQLITE_DIR/<tenant>/`. A relative path is taken inside it; without STEPWISE_SQLITE_DIR
  (in AWS, unless an operator mounts one) SQLite is refused.

A destination the guard refuses gets one fixed text whatever the address (`BLOCKED_MESSAGE`), and any
failure to connect gets another (`CONNECT_FAILED`): which port answered, refused or timed out is what a
port scanner reads, so none of it reaches the model. The detail goes to the log, scrubbed of the URL.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from stepwise.ssrf import Resolver, allow_hosts_from_env, resolve_checked
from stepwise.tools.builtin._sql import FLAVORS, Flavor, Refused

SQLITE_DIR_ENV = "STEPWISE_SQLITE_DIR"
CONNECT_TIMEOUT_SECONDS = 5  # libpq's connect_timeout, per address tried (its minimum is 2)
POSTGRES_PORT = 5432

BLOCKED_MESSAGE = (
    "DATABASE_URL's host is not allowed: it is not a public address (STEPWISE_ALLOW_HOSTS can exempt it)"
)
CONNECT_FAILED = "could not connect to the database"

# The drivers each flavor runs on: a driver not listed here would open its own sockets unguarded.
_DRIVERS = {
    "sqlite": {"sqlite": "sqlite", "sqlite+pysqlite": "sqlite"},
    "postgresql": {
        "postgresql": "postgresql+psycopg",
        "postgresql+psycopg": "postgresql+psycopg",
        "postgresql+auroradataapi": "postgresql+auroradataapi",
    },
}
# libpq parameters a tenant may set in the URL's query; each of the others either picks another
# destination (host, hostaddr, port, service) or names a file of the function (passfile, sslkey, ...).
_PG_PARAMETERS = frozenset({"sslmode", "application_name", "channel_binding", "sslnegotiation"})


def flavor_of(url: URL) -> Flavor:
    backend = url.get_backend_name()
    flavor = FLAVORS.get(backend)
    if flavor is None:
        supported = ", ".join(sorted(FLAVORS))
        raise Refused("not_configured", f"DATABASE_URL: {backend} is not supported (supported: {supported})")
    return flavor


def checked_url(url: URL, tenant_id: str) -> URL:
    """`url` as it will be connected to, or Refused (`not_configured`) when it may not be used."""
    flavor = flavor_of(url)
    driver = _DRIVERS[flavor.backend].get(url.drivername)
    if driver is None:
        supported = ", ".join(sorted(_DRIVERS[flavor.backend]))
        raise Refused(
            "not_configured", f"DATABASE_URL: the driver {url.drivername} is not supported (use {supported})"
        )
    url = url.set(drivername=driver)
    if flavor.backend == "sqlite":
        return _sqlite_url(url, tenant_id)
    if driver == "postgresql+auroradataapi":
        return url
    host = url.host or ""
    if not host or host.startswith("/") or "," in host:
        raise Refused("not_configured", "DATABASE_URL needs one host name or address (no sockets, no lists)")
    extra = sorted(set(url.query) - _PG_PARAMETERS)
    if extra:
        allowed = ", ".join(sorted(_PG_PARAMETERS))
        raise Refused(
            "not_configured", f"DATABASE_URL: the parameter {extra[0]} is not allowed (allowed: {allowed})"
        )
    return url


def _sqlite_url(url: URL, tenant_id: str) -> URL:
    root = os.environ.get(SQLITE_DIR_ENV, "").strip()
    if not root:
        raise Refused(
            "not_configured",
            f"SQLite databases are only available where {SQLITE_DIR_ENV} is set (the local stack); "
            "use a PostgreSQL DATABASE_URL",
        )
    if url.query or not url.database or url.database == ":memory:" or url.database.startswith("file:"):
        raise Refused("not_configured", "DATABASE_URL: a SQLite URL names a database file, nothing else")
    tenant_dir = (Path(root) / tenant_id).resolve()
    if tenant_dir.parent != Path(root).resolve():
        raise Refused("not_configured", "DATABASE_URL: this tenant has no SQLite directory")
    path = (tenant_dir / url.database).resolve()  # an absolute database path replaces tenant_dir
    if not path.is_relative_to(tenant_dir):
        raise Refused(
            "not_configured",
            f"DATABASE_URL: a SQLite database must be a file in this tenant's directory ({SQLITE_DIR_ENV}/"
            f"{tenant_id}/); give its name, e.g. sqlite:///shop.db",
        )
    if not path.is_file():  # sqlite would otherwise create an empty database there
        raise Refused("database_error", CONNECT_FAILED)
    return url.set(database=str(path))


def connect_guard(resolver: Resolver) -> Callable[..., None]:
    """A SQLAlchemy `do_connect` listener for psycopg: runs for every new connection, pre-ping
    reconnects included, so a DNS answer that changes between two connections is checked again."""

    def guard(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        host = str(cparams["host"])
        port = int(cparams.get("port") or POSTGRES_PORT)
        addresses = resolve_checked(host, port, allow_hosts_from_env(), resolver)  # BlockedDestination
        # libpq tries each host in turn; host[i] names hostaddr[i] for TLS, so the name repeats.
        cparams["hostaddr"] = ",".join(str(address) for address in addresses)
        cparams["host"] = ",".join([host] * len(addresses))
        cparams["connect_timeout"] = CONNECT_TIMEOUT_SECONDS

    return guard

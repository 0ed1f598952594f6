"""Where a DATABASE_URL may point, and the guard on the connection to it.

A tenant's DATABASE_URL is an outbound destination like any URL a tenant picks, so it goes through the
one SSRF guard (`stepwise.net.ssrf`):

- PostgreSQL (psycopg 3): the host is resolved once per new connection, every address is checked
  (`resolve_checked`, with STEPWISE_ALLOW_HOSTS as the only exemption, as for every outbound path),
  and libpq is handed the checked addresses as `hostaddr`, so it connects to them without a second DNS
  lookup while `host` still names the server for TLS verification. Unix sockets, several hosts and the
  libpq parameters that choose another destination or read local files (`host`, `hostaddr`, `port`,
  `service`, `passfile`, `sslkey`, ...) are refused; only the parameters in `_PG_PARAMETERS` pass.
- MySQL and MariaDB (PyMySQL): the same resolution and check; the guard opens the TCP connection to a
  checked address itself and hands PyMySQL the socket, so PyMySQL never resolves the name, while TLS
  (`ssl_mode=REQUIRED` or `VERIFY_IDENTITY`, the MySQL client's names) still verifies the URL's host
  name. PyMySQL's other connect arguments are refused in the URL (`unix_socket`, `read_default_file`
  and `init_command` pick another destination, read a file of the function or run SQL of their own),
  `LOAD DATA LOCAL` is off, and the URL must name its database (unqualified tables resolve there).
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

import dataclasses
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from stepwise.core import config
from stepwise.net.ssrf import IPAddress, Resolver, allow_hosts_from_env, resolve_checked
from stepwise.tools.builtin._sql import FLAVORS, Flavor, Refused

SQLITE_DIR_ENV = config.Storage.variable("sqlite_dir")
CONNECT_TIMEOUT_SECONDS = 5  # libpq's connect_timeout, per address tried (its minimum is 2)
POSTGRES_PORT = 5432
MYSQL_PORT = 3306
# PyMySQL's socket timeout for each read and write once connected: a backstop behind the server's own
# statement limit (set per statement by `_database`), so a peer that stops answering is dropped.
MYSQL_IO_TIMEOUT_SECONDS = 40

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
    "mysql": {"mysql": "mysql+pymysql", "mysql+pymysql": "mysql+pymysql"},
}
# libpq parameters a tenant may set in the URL's query; each of the others either picks another
# destination (host, hostaddr, port, service) or names a file of the function (passfile, sslkey, ...).
_PG_PARAMETERS = frozenset({"sslmode", "application_name", "channel_binding", "sslnegotiation"})
# The same for PyMySQL; `ssl_mode` is ours (read by the connect guard), the others go to PyMySQL.
_MYSQL_PARAMETERS = frozenset({"charset", "ssl_mode"})
SSL_MODES = ("DISABLED", "REQUIRED", "VERIFY_IDENTITY")


def flavor_of(url: URL) -> Flavor:
    backend = url.get_backend_name()
    flavor = FLAVORS.get(backend)
    if flavor is None:
        supported = ", ".join(sorted(FLAVORS))
        raise Refused("not_configured", f"DATABASE_URL: {backend} is not supported (supported: {supported})")
    if flavor.backend == "mysql":
        if not url.database:
            raise Refused("not_configured", "DATABASE_URL: a MySQL URL names its database (mysql://.../shop)")
        return dataclasses.replace(flavor, default_schema=url.database)
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
    permitted = _MYSQL_PARAMETERS if flavor.backend == "mysql" else _PG_PARAMETERS
    extra = sorted(set(url.query) - permitted)
    if extra:
        allowed = ", ".join(sorted(permitted))
        raise Refused(
            "not_configured", f"DATABASE_URL: the parameter {extra[0]} is not allowed (allowed: {allowed})"
        )
    if flavor.backend == "mysql":
        _check_mysql_query(url)
    return url


def _check_mysql_query(url: URL) -> None:
    from pymysql.charset import charset_by_name

    if url.query.get("ssl_mode", "DISABLED") not in SSL_MODES:
        raise Refused("not_configured", f"DATABASE_URL: ssl_mode is one of {', '.join(SSL_MODES)}")
    # PyMySQL looks the charset up when the connection is made, and an unknown one is an AttributeError
    # there, not a driver error: checked here, so it is a setting's mistake named as such.
    charset = url.query.get("charset")
    if charset is not None and (not isinstance(charset, str) or charset_by_name(charset) is None):
        raise Refused("not_configured", "DATABASE_URL: charset is not a character set MySQL knows")


def _sqlite_url(url: URL, tenant_id: str) -> URL:
    root = config.storage().sqlite_dir
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


def mysql_connect_guard(resolver: Resolver) -> Callable[..., Any]:
    """A SQLAlchemy `do_connect` listener for PyMySQL that makes the connection itself (SQLAlchemy uses
    what a listener returns): the name resolved and every address checked, TCP to the first checked
    address that answers, PyMySQL handed that socket. Runs for every new connection, like the PG guard."""

    def guard(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        import pymysql

        params = dict(cparams)
        host = str(params.pop("host"))
        port = int(params.pop("port", None) or MYSQL_PORT)
        mode = str(params.pop("ssl_mode", "DISABLED"))
        addresses = resolve_checked(host, port, allow_hosts_from_env(), resolver)  # BlockedDestination
        if mode == "REQUIRED":  # encrypted, the certificate unchecked: MySQL's own REQUIRED
            params["ssl"] = {"verify_mode": False, "check_hostname": False}
        elif mode == "VERIFY_IDENTITY":  # the system's CAs, and the certificate must name `host`
            params |= {"ssl_verify_cert": True, "ssl_verify_identity": True}
        connection = pymysql.connections.Connection(
            host=host,  # what TLS verifies and errors name; the socket below is what is connected to
            port=port,
            **params,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=MYSQL_IO_TIMEOUT_SECONDS,
            write_timeout=MYSQL_IO_TIMEOUT_SECONDS,
            local_infile=False,  # a server's LOAD DATA LOCAL request would read a file of the function
            defer_connect=True,
        )
        connection.connect(_open_socket(addresses, port))
        return connection

    return guard


def _open_socket(addresses: list[IPAddress], port: int) -> socket.socket:
    failure: OSError | None = None
    for address in addresses:
        try:
            sock = socket.create_connection((str(address), port), timeout=CONNECT_TIMEOUT_SECONDS)
        except OSError as exc:
            failure = exc
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        return sock
    raise failure or OSError("no address to connect to")

"""A throwaway MariaDB server for tests: `mariadb-install-db` in a temporary directory, listening on
127.0.0.1 on a free port with its unix socket inside that directory, stopped (and deleted) when the test
session ends. Like tests/fakes/postgres.py for PostgreSQL.

The binaries are Debian's `mariadb-server` (`mariadb-install-db`, `mariadbd`), which `make test`
installs when missing. As root (mariadbd refuses to run as root) the server runs as the `mysql` user the
package creates, or `nobody`. Setup statements go over the unix socket as root (the socket
authentication the install sets up); the code under test connects over TCP as a user with a password,
the way a tenant's DATABASE_URL does.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.eventually import eventually
from tests.fakes.daemons import free_port, run_as

_START_TIMEOUT = 60  # seconds for the server to accept connections


def binaries() -> tuple[Path, Path] | None:
    """(mariadb-install-db, mariadbd), or None when MariaDB is not installed."""
    install = shutil.which("mariadb-install-db")
    server = shutil.which("mariadbd") or next(
        (str(p) for p in (Path("/usr/sbin/mariadbd"), Path("/usr/sbin/mysqld")) if p.exists()), None
    )
    if install is None or server is None:
        return None
    return Path(install), Path(server)


@dataclass(frozen=True)
class Server:
    port: int
    socket_path: Path
    directory: Path

    def url(self, user: str, password: str, database: str) -> str:
        """A DATABASE_URL over TCP to 127.0.0.1 (what the SSRF guard sees)."""
        return f"mysql://{user}:{password}@127.0.0.1:{self.port}/{database}"

    def sql(self, statements: str, database: str | None = None) -> list[tuple[object, ...]]:
        """Run `statements` as root over the socket (setup only: PyMySQL, not the code under test);
        the rows of the last one."""
        import pymysql

        connection = pymysql.connect(
            unix_socket=str(self.socket_path), user="root", database=database, autocommit=True
        )
        try:
            rows: list[tuple[object, ...]] = []
            with connection.cursor() as cursor:
                for statement in (s.strip() for s in statements.split(";")):
                    if statement:
                        cursor.execute(statement)
                        rows = list(cursor.fetchall())
            return rows
        finally:
            connection.close()


@contextlib.contextmanager
def server() -> Iterator[Server]:
    """Start a server and yield it; RuntimeError (with what to install) when MariaDB is missing."""
    found = binaries()
    if found is None:
        raise RuntimeError(
            "MariaDB is not installed: `make test` installs Debian's mariadb-server, or run "
            "`apt-get install -y mariadb-server`"
        )
    install, mariadbd = found
    user = run_as("mysql", "nobody")
    directory = Path(tempfile.mkdtemp(prefix="stepwise-mariadb-"))
    data, sock = directory / "data", directory / "mysqld.sock"
    data.mkdir()
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (directory, data):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    port = free_port()
    user_args = [f"--user={user}"] if user else []
    subprocess.run(
        [str(install), "--no-defaults", f"--datadir={data}", "--auth-root-authentication-method=socket",
         "--skip-test-db", *user_args],
        check=True, capture_output=True, timeout=_START_TIMEOUT + 30, cwd=directory,
    )  # fmt: skip
    process = subprocess.Popen(
        [str(mariadbd), "--no-defaults", f"--datadir={data}", f"--socket={sock}", f"--port={port}",
         "--bind-address=127.0.0.1", "--skip-name-resolve", "--innodb-flush-log-at-trx-commit=0",
         f"--log-error={directory / 'error.log'}", f"--pid-file={directory / 'mariadbd.pid'}", *user_args],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=directory,
    )  # fmt: skip
    try:
        running = Server(port=port, socket_path=sock, directory=directory)
        _wait_until_up(running, process)
        yield running
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


def _wait_until_up(running: Server, process: subprocess.Popen[bytes]) -> None:
    import pymysql

    def answers() -> bool:
        if process.poll() is not None:
            log = running.directory / "error.log"
            raise RuntimeError(f"mariadbd exited: {log.read_text()[-2000:] if log.exists() else ''}")
        try:
            running.sql("SELECT 1")
        except pymysql.err.OperationalError as error:
            raise AssertionError(error) from error  # not up yet
        return True

    eventually(answers, timeout=_START_TIMEOUT, interval=0.1, what="mariadbd to accept connections")

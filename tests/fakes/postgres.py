"""A throwaway PostgreSQL cluster for tests: initdb in a temporary directory, listening on 127.0.0.1 on a
free port with its unix socket inside that directory, stopped (and deleted) when the test session ends.

The binaries are PostgreSQL's own (`initdb`, `pg_ctl`, `postgres`): on PATH, else Debian's
/usr/lib/postgresql/<version>/bin, which `make test` installs when missing. As root (initdb refuses
to run as root) the cluster runs as the `postgres` user, or `nobody` where there is none.
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

from tests.fakes.daemons import free_port, run_as

_START_TIMEOUT = 60  # seconds for pg_ctl -w to see the server accept connections


def binaries() -> Path | None:
    """The directory holding initdb and pg_ctl, or None when PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    return None


@dataclass(frozen=True)
class Cluster:
    port: int
    superuser: str
    directory: Path

    def url(self, user: str | None = None, password: str | None = None, database: str = "postgres") -> str:
        """A DATABASE_URL over TCP to 127.0.0.1 (what the SSRF guard sees), as `user` or the superuser."""
        credentials = user or self.superuser
        if password:
            credentials += f":{password}"
        return f"postgresql://{credentials}@127.0.0.1:{self.port}/{database}"

    def sql(self, statements: str, database: str = "postgres") -> None:
        """Run `statements` as the superuser (setup only: psycopg, not the code under test)."""
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.superuser, dbname=database, autocommit=True
        ) as connection:
            connection.execute(statements.encode())


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    """Start a cluster and yield it; RuntimeError (with what to install) when PostgreSQL is missing."""
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError(
            "PostgreSQL is not installed: `make test` installs Debian's postgresql, or run "
            "`apt-get install -y postgresql`"
        )
    user = run_as("postgres", "nobody")
    superuser = user or pwd.getpwuid(os.geteuid()).pw_name
    directory = Path(tempfile.mkdtemp(prefix="stepwise-pg-"))
    data, sockets = directory / "data", directory / "run"
    sockets.mkdir()
    if user is not None:
        entry = pwd.getpwnam(user)
        for path in (directory, sockets):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    port = free_port()

    def run(*args: str) -> None:
        subprocess.run(
            args, check=True, capture_output=True, timeout=_START_TIMEOUT + 30, user=user, cwd=directory
        )

    # trust over loopback and the socket: the cluster lives for one test session on 127.0.0.1 only.
    run(str(bin_dir / "initdb"), "-D", str(data), "-U", superuser, "--auth=trust", "-E", "UTF8", "--no-sync")
    options = (
        f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={sockets} -c fsync=off"
    )
    run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(directory / "log"), "-w", "start")
    try:
        yield Cluster(port=port, superuser=superuser, directory=directory)
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(directory, ignore_errors=True)

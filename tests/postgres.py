"""A PostgreSQL server of the tests' own on loopback: Debian's `postgresql` binaries (`.ci/run` installs the package
where it is absent), a fresh cluster in a temporary folder, trust authentication, a free port; one database per test.

PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user (created by Debian's package)
and its commands run as that user (`runuser`), as KNOWN_TRAPS 22 describes.

Example:

>>> server = postgres.start()  # doctest: +SKIP
>>> url = server.database("sweep_test")  # doctest: +SKIP
>>> server.pause(); server.resume()  # a server restart, as a sweep may meet one  # doctest: +SKIP
>>> server.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from typing import Optional


def binaries() -> Optional[str]:
    """The folder of `initdb` and `pg_ctl`: Debian's newest, else whichever is on PATH; None without a server."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    path = found[-1] if found else shutil.which("pg_ctl")
    return os.path.dirname(path) if path else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, bindir: str):
        self.bindir, self.port = bindir, _free_port()
        self.root = tempfile.mkdtemp(prefix="tf-transfer-pg-")
        self.data, self.user = os.path.join(self.root, "data"), None
        if os.geteuid() == 0:
            self.user = "postgres"
            shutil.chown(self.root, self.user, self.user)
        self._run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        self.resume()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def resume(self) -> None:
        """Starts the server (again, on its port, after `pause`)."""
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.root, "log"), "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                  "-c synchronous_commit=off -c full_page_writes=off", "start")

    def pause(self) -> None:
        """Stops the server as an administrator's restart does (`pg_ctl -m fast stop`: open connections are cut),
        keeping its data for `resume`."""
        self._run("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def _run(self, program: str, *args: str) -> None:
        command = [os.path.join(self.bindir, program), *args]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        subprocess.run(command, check=True, capture_output=True, text=True, timeout=120, cwd=self.root)

    def database(self, name: str) -> str:
        """A new, empty database `name` on the server; its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}"')
            connection.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def start() -> Optional[Server]:
    """A running server, or None where there are no PostgreSQL binaries or no psycopg."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return None
    bindir = binaries()
    return Server(bindir) if bindir else None

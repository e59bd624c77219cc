"""A throwaway PostgreSQL server on loopback for the gradebook tests."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HOW_TO_ENABLE = ("PostgreSQL's server is not installed. On Debian or Ubuntu: `apt-get install -y postgresql` "
                 "(.ci/run does this on CI), then run the tests again.")


def server_bin() -> Path | None:
    """The folder with initdb and pg_ctl: Debian's /usr/lib/postgresql/<version>/bin, or PATH."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name),
                         reverse=True):
        if os.access(os.path.join(folder, "initdb"), os.X_OK):
            return Path(folder)
    found = shutil.which("initdb")
    return Path(found).parent if found and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """initdb + pg_ctl in a scratch folder, listening on 127.0.0.1 only, trust authentication."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="attention-pg-", dir="/tmp"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:  # the server refuses to run as root: run it as the postgres user
            shutil.chown(self.dir, "postgres")
            self.prefix = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([*self.prefix, *args], cwd=self.dir, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            log = self.dir / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed: {proc.stderr[-2000:]}\n{tail}")
        return proc

    def start(self) -> "PostgresServer":
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--no-sync", "--no-instructions")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c fsync=off -c max_connections=100"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.dir / "server.log"),
                  "-w", "-t", "60", "start")
        return self

    def create_database(self, name: str) -> str:
        """A new database; returns its SQLAlchemy URL."""
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        conn.close()
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except Exception:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)

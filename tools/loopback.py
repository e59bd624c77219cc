"""A real Dask cluster on this machine, for the tests and ``make bench``: a ``dask scheduler`` and ``dask worker``
processes on loopback, each worker in a folder of its own as on machines of their own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class LoopbackCluster:
    """A real ``dask scheduler`` and ``workers`` ``dask worker`` processes (one thread each) on loopback, each
    worker in its own empty folder with its own temporary folder, as on machines of their own; stopped by
    process group. For the tests and ``make bench``."""

    def __init__(self, folder: Path, workers: int):
        self.folder, self.procs, self.workers, self.tmps = folder, {}, [], []
        self.dask = str(Path(sys.executable).parent / "dask")
        env = dict(os.environ, PATH="/usr/bin:/bin")  # the workers find what they need without the venv on PATH
        sched_file = folder / "scheduler.json"
        (folder / "scheduler").mkdir(parents=True)
        self._start("scheduler", ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                  "--scheduler-file", str(sched_file)], folder / "scheduler", env)
        deadline = time.monotonic() + 60
        while not sched_file.exists():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Dask scheduler did not start: see {folder / 'scheduler.log'}")
            time.sleep(0.2)
        self.address = json.loads(sched_file.read_text())["address"]
        for i in range(workers):
            home = folder / f"worker-{i}"
            home.mkdir()
            self.tmps.append(tempfile.mkdtemp(prefix=f"attention-w{i}-", dir="/tmp"))  # short: kernels bind sockets
            self.workers.append(home)
            self._start(f"worker-{i}", ["worker", self.address, "--nthreads", "1", "--no-dashboard",
                                        "--local-directory", str(home)], home, dict(env, TMPDIR=self.tmps[-1]))
        from distributed import Client

        with Client(self.address, timeout="30s") as client:
            client.wait_for_workers(workers, timeout=120)

    def _start(self, name: str, args: list[str], cwd: Path, env: dict) -> None:
        with open(self.folder / f"{name}.log", "wb") as log:
            self.procs[name] = subprocess.Popen([self.dask, *args], cwd=cwd, env=env, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, name: str) -> None:
        """SIGKILL a process and everything it started (a machine that went away)."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)
        for tmp in self.tmps:  # what a killed worker's kernels left behind
            shutil.rmtree(tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

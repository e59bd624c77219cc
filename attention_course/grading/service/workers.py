"""Where the grading service's hand-ins are graded: local worker processes or the workers of a Dask scheduler,
each grading in a scratch course of its own (:func:`.cluster.grade_on_worker`) and returning the executed notebooks,
so that the service stays the gradebook's one writer."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from ..errors import CourseError
from ..run.cluster import grade_on_worker, prepare, use_scratch, worker_name
from ..run.worker import drop_pool


def _orphan_guard(workdir: str) -> None:
    """A local worker's start: it dies with the service (a killed service leaves no worker writing anything), and
    grades in a scratch course of its own under the service's folder."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the service died before the guard was set
        os._exit(1)

    use_scratch(Path(tempfile.mkdtemp(prefix="worker-", dir=workdir)))


def _warm(payloads: list) -> str:
    """Make a worker ready before the first hand-in comes: its scratch course with each assignment on submit
    registered, its fork server started (what the first hand-in would otherwise wait for)."""
    # a sandbox the worker refuses, or the course's own problem (its nbgrader, a test that cannot be registered: a
    # SystemExit from the worker's nbgrader_config.py would end a Dask worker): said when a hand-in is graded
    with contextlib.suppress(RuntimeError, CourseError, SystemExit):
        for payload in payloads:
            prepare(payload)
    return worker_name()


class LocalWorkers:
    """Grading processes on this machine (spawned, each with its fork server): ``grade(payload, student, handin)``."""

    def __init__(self, count: int, workdir: Path):
        self.capacity, self.workdir, self.pool = count, workdir, None

    def submit(self, payload: dict, student: str, handin: dict):
        return self.submit_call(grade_on_worker, payload, student, handin)

    def warm(self, payloads: list) -> list:
        return [self.submit_call(_warm, payloads) for _ in range(self.capacity)]

    def submit_call(self, function, *args):
        if self.pool is None:
            self.pool = ProcessPoolExecutor(max_workers=self.capacity, mp_context=get_context("spawn"),
                                            initializer=_orphan_guard, initargs=(str(self.workdir),))
        return self.pool.submit(function, *args)

    def broken(self) -> None:
        """The pool lost a worker (or the service stops): its processes ended, a new pool for what comes next."""
        if self.pool is not None:
            drop_pool(self.pool)  # a hand-in being graded is graded again by the next pool (or the next run)
            self.pool = None

    def close(self) -> None:
        self.broken()


class DaskWorkers:
    """The workers of a Dask scheduler (``dask worker ADDRESS --nthreads 1`` on each machine)."""

    def __init__(self, address: str):
        from distributed import Client

        self.client = Client(address, timeout="30s", name="attention-course-service")
        self.payloads: dict[str, tuple[str, object]] = {}

    @property
    def capacity(self) -> int:
        return max(1, sum(self.client.nthreads().values()))

    def warm(self, payloads: list) -> list:
        return [self.client.submit(_warm, payloads, workers=[address], pure=False, key=f"warm-{os.urandom(4).hex()}")
                for address in self.client.nthreads()]

    def submit(self, payload: dict, student: str, handin: dict):
        key = payload["assignment"]
        if self.payloads.get(key, ("",))[0] != payload["fingerprint"]:
            scattered = self.client.scatter([payload], hash=False, broadcast=True)[0]
            self.payloads[key] = (payload["fingerprint"], scattered)
        return self.client.submit(grade_on_worker, self.payloads[key][1], student, handin, pure=False,
                                  key=f"on-submit-{key}-{student}-{os.urandom(4).hex()}")

    def broken(self) -> None:
        self.payloads.clear()  # scattered data may have died with its worker: scatter again

    def close(self) -> None:
        self.client.close()


class LogStream:
    """A stream whose lines go to the service's log."""

    def __init__(self, log):
        self.log, self.buffer = log, ""

    def write(self, text: str) -> None:
        self.buffer += text
        while "\n" in self.buffer:
            line, self.buffer = self.buffer.split("\n", 1)
            if line.strip():
                self.log(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

"""The time a limit charges a hand-in: what its processes had of the machine, not what the machine took from them.

A cell's and a notebook's limits are meant for the student's code: a loop that never ends, a sleep, a computation far
larger than the task. On a loaded grading machine (a deadline rush, other jobs beside the grader, a slow hour of a
shared host) the same cell needs more wall time, because its processes wait, runnable, for a CPU that others hold;
a wall-clock limit charges that wait to the student, which is charging her for the grader's environment.

A :class:`Clock` watches a hand-in's processes (a kernel and what it started, the judge checking its results) and
charges, since it started,

    max(the CPU time the processes used, the wall time less the time their main threads waited for a CPU,
        the wall time / STRETCH)

Waiting for a CPU is Linux's ``run_delay`` (``/proc/<pid>/schedstat``): the time a thread was ready to run and did
not. A sleep, a blocking read and a busy loop are all charged in full, as by the wall clock, on an idle machine and a
loaded one alike; only a wait for a CPU is not. The CPU term keeps a hand-in from earning time with processes of its
own that compete with each other (what they run is charged); ``STRETCH`` bounds what any hand-in can earn: a limit
never lets a cell run longer than ``STRETCH`` times its length by the wall clock. Where ``/proc`` tells nothing (not
Linux, a process this user cannot read), nothing is credited and the limit is the wall clock's.
"""

from __future__ import annotations

import os
import time

#: A limit of ``t`` seconds stops a cell after ``STRETCH * t`` seconds by the wall clock at the latest, however
#: loaded the machine is.
STRETCH = 4.0
#: At most this many processes of a tree are read (a kernel that forks without end is stopped by its process cap).
MAX_PROCESSES = 256
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (breadth first, at most :data:`MAX_PROCESSES`), as ``/proc`` lists them now."""
    found, todo = [], [pid]
    while todo and len(found) < MAX_PROCESSES:
        p = todo.pop(0)
        found.append(p)
        for task in _read(f"/proc/{p}/task/{p}/children").split():
            if task.isdigit():
                todo.append(int(task))
    return found


def usage(pid: int) -> tuple[float, float]:
    """(CPU seconds the process used, its threads and waited-for children included; seconds its main thread waited,
    runnable, for a CPU). (0, 0) where ``/proc`` does not tell."""
    stat = _read(f"/proc/{pid}/stat")
    cpu = 0.0
    fields = stat.rpartition(")")[2].split()
    if len(fields) > 14:  # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15)
        try:
            cpu = sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICK
        except ValueError:
            cpu = 0.0
    sched = _read(f"/proc/{pid}/schedstat").split()
    try:
        waited = int(sched[1]) / 1e9 if len(sched) >= 2 else 0.0
    except ValueError:
        waited = 0.0
    return cpu, waited


class Clock:
    """Seconds charged to the processes it watches since it started (see the module's text). ``watch`` adds a root
    (its descendants are found at each reading); a process that ends keeps what it was last read to have used."""

    def __init__(self, *roots: int):
        self.start = time.monotonic()
        self._roots: list[int] = []
        self._base: dict[int, tuple[float, float]] = {}
        self._last: dict[int, tuple[float, float]] = {}
        for root in roots:
            self.watch(root)

    def watch(self, root: int | None) -> None:
        if root is None or root in self._roots:
            return
        self._roots.append(root)
        for pid in tree(root):
            self._base.setdefault(pid, usage(pid))

    def wall(self) -> float:
        return time.monotonic() - self.start

    def charged(self) -> float:
        wall = self.wall()
        for root in self._roots:
            for pid in tree(root):
                now = usage(pid)
                self._base.setdefault(pid, (0.0, 0.0))  # started since: all it used is in the window
                last = self._last.get(pid, now)
                self._last[pid] = (max(now[0], last[0]), max(now[1], last[1]))
        cpu = sum(max(0.0, last[0] - self._base[pid][0]) for pid, last in self._last.items())
        waited = sum(max(0.0, last[1] - self._base[pid][1]) for pid, last in self._last.items())
        return min(wall, max(cpu, wall - waited, wall / STRETCH))

    def credit(self) -> float:
        """Wall seconds not charged so far: the time the machine took from the watched processes."""
        return max(0.0, self.wall() - self.charged())

    def past(self, limit: float) -> bool:
        """Whether ``limit`` seconds are charged. ``/proc`` is read only once the wall clock is past the limit."""
        return self.wall() > limit and self.charged() > limit

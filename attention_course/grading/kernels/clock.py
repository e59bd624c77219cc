"""The time a limit charges a hand-in: what its processes had of the machine, not what the machine took from them.

A cell's and a notebook's limits are meant for the student's code: a loop that never ends, a sleep, a computation far
larger than the task. On a loaded grading machine (a deadline rush, other jobs beside the grader, a slow hour of a
shared host) the same cell needs more wall time, because its processes wait, runnable, for a CPU that others hold;
a wall-clock limit charges that wait to the student, which is charging her for the grader's environment.

A :class:`Clock` watches a hand-in's processes (a kernel and what it started, the judge checking its results) and
charges, since it started,

    max(the CPU time they used, the wall time less the time their executing threads waited for a CPU,
        the wall time / STRETCH)

(never more than the wall time). Waiting for a CPU is Linux's ``run_delay`` (``/proc/<pid>/schedstat``): the time a
thread was ready to run and did not. It is read for the threads that run the cell alone: the kernel's main thread
(the process the agent connected from, :attr:`.kernel.Kernel.main_pid`) and the judge's. A sleep, a blocking read
and a busy loop are charged in full, on an idle machine and a loaded one alike; only a wait for a CPU is not. The CPU
term keeps a hand-in from earning time with processes or threads of its own that compete with its main thread: what
they run is charged. So a kernel's wait is credited only where all its CPU is counted, by its cgroup (``cpuacct.usage``
or v2 ``cpu.stat``: every process it started, whoever its parent is now, reaped or not), and never while its main
thread has lowered its own priority (a nice value above 0, an idle or batch policy); a process tree alone loses
children that end unwaited. ``STRETCH`` bounds what any hand-in can earn: no limit lets a cell run longer than
``STRETCH`` times its length by the wall clock. Where ``/proc`` or the cgroup tells nothing (not Linux, a process this
user cannot read, a host without cgroups), nothing is credited and the limit is the wall clock's.
"""

from __future__ import annotations

import os
import socket
import struct
import time

#: A limit of ``t`` seconds stops a cell after ``STRETCH * t`` seconds by the wall clock at the latest, however
#: loaded the machine is.
STRETCH = 4.0
#: At most this many processes of a tree are read (a kernel that forks without end is stopped by its process cap).
MAX_PROCESSES = 256
#: Readings closer together than this reuse the last one (a kernel flooding messages past its limit is read from
#: ``/proc`` at most this often), charging all wall time since it.
MIN_INTERVAL = 0.05
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (breadth first, at most :data:`MAX_PROCESSES`), as ``/proc`` lists them now: the
    children of every thread, not only of the main one."""
    found, todo = [], [pid]
    while todo and len(found) < MAX_PROCESSES:
        p = todo.pop(0)
        if p in found:
            continue
        found.append(p)
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            tasks = []
        for task in tasks:
            todo.extend(int(c) for c in _read(f"/proc/{p}/task/{task}/children").split() if c.isdigit())
    return found


def usage(pid: int) -> tuple[int, float]:
    """(the process's start time in clock ticks, which tells it from a later process of the same pid; the CPU
    seconds it used, its threads and waited-for children included). (0, 0.0) where ``/proc`` does not tell."""
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    try:  # after the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14) ... starttime(19)
        return int(fields[19]), sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICK
    except (IndexError, ValueError):
        return 0, 0.0


def waited(pid: int) -> float:
    """Seconds the process's main thread has waited, runnable, for a CPU (0 where ``/proc`` does not tell)."""
    sched = _read(f"/proc/{pid}/schedstat").split()
    try:
        return int(sched[1]) / 1e9
    except (IndexError, ValueError):
        return 0.0


def yields(pid: int) -> bool:
    """Whether the process's main thread has lowered its own priority (a nice value above 0, or a policy other than
    the ordinary one): its waits for a CPU are then its own choice. True where ``/proc`` does not tell."""
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    try:  # nice(16), policy(38)
        return int(fields[16]) > 0 or int(fields[38]) != 0
    except (IndexError, ValueError):
        return True


def cgroup_cpu(path: str) -> float:
    """CPU seconds a cgroup's processes used: v2 ``cpu.stat`` (``usage_usec``), v1 ``cpuacct.usage`` (ns)."""
    text = _read(path)
    try:
        if path.endswith("cpu.stat"):
            return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("usage_usec ")) / 1e6
        return int(text) / 1e9
    except (StopIteration, IndexError, ValueError):
        return 0.0


def peer_pid(sock: socket.socket) -> int | None:
    """The pid (in this process's namespace) of the process at the other end of a Unix socket when it connected."""
    try:
        pid, _, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    except (OSError, AttributeError):
        return None
    return pid or None


class Clock:
    """Seconds charged to the processes it watches since it started (see the module's text).

    Each of ``watched`` is one party: ``{"root": pid, "main": pid, "cgroups": [files], "whole": bool}``. The CPU of
    the root's process tree is charged (its descendants are found at each reading; a process that ends keeps what it
    was last read to have used), or that of its cgroup counters where they counted more; the main thread's wait for
    a CPU is not charged where the party's CPU is all counted: its cgroup counts it, or it is ``whole`` (the judge,
    which starts no process). :meth:`.kernel.Kernel.watched` is a kernel's party."""

    def __init__(self, *watched: dict):
        self.start = time.monotonic()
        self._parties = []
        for party in watched:
            root, main, files = party.get("root"), party.get("main"), [c for c in party.get("cgroups") or () if c]
            if not root:
                continue
            credited = main if main and (files or party.get("whole")) else None
            base = {}
            for pid in tree(root):
                key_start, cpu = usage(pid)
                base.setdefault((pid, key_start), cpu)
            self._parties.append({"root": root, "main": credited, "waited": waited(credited) if credited else 0.0,
                                  "cgroups": {c: cgroup_cpu(c) for c in files}, "base": base, "last": {}})
        self._reading = False
        self._read_at, self._charged = self.start, 0.0

    def wall(self) -> float:
        return time.monotonic() - self.start

    @property
    def busy(self) -> bool:
        """Whether a reading is under way (a signal handler that interrupts one must not start another)."""
        return self._reading

    def charged(self) -> float:
        now = time.monotonic()
        wall = now - self.start
        if now - self._read_at < MIN_INTERVAL or self._reading:
            return min(wall, self._charged + (now - self._read_at))
        self._reading = True
        try:
            cpu = delay = 0.0
            for party in self._parties:
                base, last = party["base"], party["last"]
                for pid in tree(party["root"]):
                    key_start, used = usage(pid)
                    key = (pid, key_start)
                    base.setdefault(key, 0.0)  # started since: all it used is in the window
                    last[key] = max(used, last.get(key, used))
                seen = sum(max(0.0, used - base[key]) for key, used in list(last.items()))
                cpu += max([seen] + [cgroup_cpu(c) - start for c, start in party["cgroups"].items()])
                main = party["main"]
                if main and not yields(main):
                    delay += max(0.0, waited(main) - party["waited"])
            self._charged = min(wall, max(cpu, wall - delay, wall / STRETCH))
            self._read_at = now
        finally:
            self._reading = False
        return self._charged

    def credit(self) -> float:
        """Wall seconds not charged so far: the time the machine took from the watched processes."""
        return max(0.0, self.wall() - self.charged())

    def past(self, limit: float) -> bool:
        """Whether ``limit`` seconds are charged. ``/proc`` is read only once the wall clock is past the limit."""
        return self.wall() > limit and self.charged() > limit

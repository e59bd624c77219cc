"""The judge in a process of its own: trusted code working on untrusted data, with limits.

Test cells compute on what a student's code returns (and on what it passes to callbacks the
tests give it). That work must not be able to exhaust the grader, so the judge namespace of a
notebook lives in a process forked from the grading process's fork server
(:mod:`attention_course.grading.kernels.forkserver`), capped in address space (``RLIMIT_AS``) and
timed: a test cell that runs past its limit is stopped by an alarm inside the judge process,
and the grader kills the process if even that does not answer. The cell then scores 0 with a
message saying why, and a new judge process (the locked cells run again) grades the rest.

The grader talks to its judge process over a socket pair (one JSON message per packet); the
socket to the agent in the student's kernel is handed over with ``SCM_RIGHTS`` whenever the
kernel is (re)started.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import time

from .. import trust
from ..kernels.clock import Clock
from .failures import GradingInterrupt, KernelGone, KernelTimeout
from .judge import Connection, Judge

_MAX_PACKET = 1 << 20


class JudgeTimeout(GradingInterrupt):
    """The judge's own work on a cell ran past the cell's time limit."""


#: The running cell's clock, the limit its alarm charges (:mod:`..kernels.clock`) and its connection to the kernel.
_TIMER: list = [None, 0.0, None]


def _alarm(signum, frame):
    clock, limit, conn = _TIMER
    if clock is None:  # no cell is running: an alarm that came due as the last one ended
        return
    if clock.busy:  # the alarm interrupted a reading of the same clock: read it a moment later
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        return
    if not clock.past(limit):  # the machine, not the cell, took the time: the alarm moves on
        signal.setitimer(signal.ITIMER_REAL, max(0.05, limit - clock.charged()))
        return
    if conn is not None and conn.receiving:  # stopped halfway through what the kernel sends: the kernel's time
        conn.broken = True
        raise KernelTimeout("the student's code took too long")
    raise JudgeTimeout("time is up")


def _number(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def outcome(exc: BaseException | None, timeout: float, memory_bytes: int, judge: Judge | None = None) -> dict:
    """A test cell's result as the grader records it: a status and the one-line message students see (on a hidden
    line, nothing the student's code said: :func:`.trust.shown_failure`)."""
    if exc is None:
        return {"status": "ok"}
    if isinstance(exc, KernelTimeout):
        return {"status": "timeout", "ename": "CellTimeoutError",
                "evalue": f"the code under test ran longer than {timeout:g} s and was stopped"}
    if isinstance(exc, KernelGone):
        return {"status": "gone", "ename": "DeadKernelError", "evalue": f"the kernel did not answer the tests ({exc})"}
    if isinstance(exc, JudgeTimeout):
        return {"status": "limit", "ename": "CellTimeoutError",
                "evalue": f"checking what your code returned took longer than {timeout:g} s and was stopped: are "
                          "your results (or the inputs your code passes back to the tests) far larger than the "
                          "task asks for?"}
    if isinstance(exc, MemoryError) and not getattr(exc, "from_kernel", False):
        return {"status": "limit", "ename": "ResourceLimitError",
                "evalue": f"checking what your code returned needed more than {memory_bytes / 2**30:g} GiB of "
                          "memory and was stopped: are your results (or the inputs your code passes back to the "
                          "tests) far larger than the task asks for?"}
    hidden, texts = (judge.hidden, judge.conn.texts if judge.conn is not None else []) if judge else (frozenset(), [])
    return {"status": "error", "ename": type(exc).__name__, "evalue": trust.shown_failure(exc, hidden, texts)}


def serve(fd: int, settings: dict) -> int:
    """The judge process's loop (runs in a fork of the fork server): answer the grader until it hangs up."""
    memory = int(settings.get("memory_bytes") or 0)
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        os.chdir(settings.get("cwd") or "/")
    except OSError:
        os.chdir("/")
    os.environ["MPLBACKEND"] = "Agg"
    ctrl = socket.socket(fileno=fd)
    judge = Judge(None)
    signal.signal(signal.SIGALRM, _alarm)
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctrl, _MAX_PACKET, 1)
        except OSError:
            return 0
        if not data:
            return 0
        msg = json.loads(data)
        op = msg.get("op")
        reply: dict = {"status": "ok"}
        if op == "conn":
            if judge.conn is not None:
                judge.conn.sock.close()
            judge.conn = Connection(socket.socket(fileno=fds[0])) if fds else None
            if judge.conn is not None:
                judge.conn.signatures, judge.conn.hide = judge.signatures, judge.hide
        elif op == "allow":
            judge.allowed = frozenset(msg.get("names", []))
            signatures = msg.get("signatures", {})
            judge.signatures = {str(k): tuple(map(str, v)) for k, v in signatures.items()} \
                if isinstance(signatures, dict) else {}
            judge.hide = tuple(str(n) for n in msg.get("globals", []) if isinstance(n, str))
            if judge.conn is not None:
                judge.conn.signatures, judge.conn.hide = judge.signatures, judge.hide
        elif op in ("locked", "test"):
            timeout = float(msg.get("timeout", 60))
            kernel = msg.get("kernel") if isinstance(msg.get("kernel"), dict) else {}  # Kernel.watched(), for a test
            cgroups = kernel.get("cgroups") if isinstance(kernel.get("cgroups"), list) else []
            clock = Clock({"root": os.getpid(), "main": os.getpid(), "whole": True},  # the judge starts no process
                          {"root": _number(kernel.get("root")), "main": _number(kernel.get("main")),
                           "cgroups": [c for c in cgroups if isinstance(c, str)]})
            conn = judge.conn
            if conn is not None:
                conn.broken = bool(msg.get("broken"))
                conn.deadline = time.monotonic() + timeout
                conn.clock, conn.limit = clock, timeout
            error = None
            _TIMER[:] = [clock, timeout + 1.0, conn]
            signal.setitimer(signal.ITIMER_REAL, timeout + 1.0)
            try:
                judge.run(msg["source"], fetch=(op == "test"))
            except BaseException as exc:  # every failure, our own limits included, is this cell's result
                error = exc
            finally:
                _TIMER[:] = [None, 0.0, None]  # first: an alarm due now finds no cell and does nothing
                signal.setitimer(signal.ITIMER_REAL, 0)
            if isinstance(error, JudgeTimeout) and conn is not None:
                conn.broken = True  # the alarm may have cut a conversation with the kernel in half
            reply = outcome(error, timeout, memory, judge)
            reply["credit"] = clock.credit()  # wall seconds not charged: the notebook's deadline moves on by them
            if conn is not None:
                conn.deadline, conn.clock = None, None
                reply["broken"] = conn.broken
                if conn.notes:
                    reply["notes"] = list(conn.notes)
        else:
            reply = {"status": "error", "ename": "GradingError", "evalue": f"unknown request {op!r}"}
        for extra in fds[1:] if op == "conn" else fds:
            os.close(extra)
        ctrl.send(json.dumps(reply).encode())


class JudgeProcess:
    """The grader's handle on one notebook's judge process."""

    def __init__(self, server, memory_bytes: int, cwd: str):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = server.launch_judge(theirs.fileno(), memory_bytes, cwd)
        finally:
            theirs.close()
        self.sock = ours

    def watched(self) -> dict:
        """The judge as a :class:`..kernels.clock.Clock` watches it: it starts no process of its own."""
        return {"root": self.proc.pid, "main": self.proc.pid, "whole": True}

    def request(self, msg: dict, timeout: float, fds: list[int] = (), clock: Clock | None = None) -> dict | None:
        """Send one request and wait for its answer; None (and the process is killed) past ``timeout`` (as ``clock``
        charges it, where one is given)."""
        if self.sock is None:
            return None
        try:
            socket.send_fds(self.sock, [json.dumps(msg).encode()], list(fds))
            while True:  # one packet a message: a wait cut short loses nothing
                spent = clock.charged() if clock is not None and clock.wall() > timeout else \
                    (clock.wall() if clock is not None else 0.0)
                if spent >= timeout:
                    raise TimeoutError
                self.sock.settimeout(max(0.05, timeout - spent))
                try:
                    data = self.sock.recv(_MAX_PACKET)
                    break
                except socket.timeout:
                    if clock is None:
                        raise
        except OSError:  # socket.timeout and TimeoutError included
            data = b""
        if not data:
            self.close()
            return None
        return json.loads(data)

    def alive(self) -> bool:
        return self.sock is not None and self.proc.alive()

    def close(self) -> None:
        self.proc.kill()
        if self.sock is not None:
            self.sock.close()
            self.sock = None

"""The time a limit charges (kernels/clock.py): a wait for a CPU that other work holds is not charged; a sleep, a
busy loop and processes that compete with each other are, in full.

Each test pins the processes it measures to one CPU with busy loops beside them where it says so, and reads a
:class:`Clock` of them over about a second of wall time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from attention_course.grading.kernels.clock import STRETCH, Clock, tree, usage

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="Linux's /proc/<pid>/schedstat")

BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"
CPU = min(os.sched_getaffinity(0))


def pinned(code: str) -> subprocess.Popen:
    """A Python running ``code`` on :data:`CPU` alone."""
    return subprocess.Popen([sys.executable, "-c", code], preexec_fn=lambda: os.sched_setaffinity(0, {CPU}))


def measure(proc: subprocess.Popen, seconds: float = 1.2) -> tuple[float, float]:
    time.sleep(0.2)  # the process has started
    clock = Clock(proc.pid)
    time.sleep(seconds)
    return clock.wall(), clock.charged()


@pytest.fixture
def busy_cpu():
    """Two busy loops on :data:`CPU`: what a loaded grading machine does to a kernel's share of it."""
    loops = [pinned(BUSY) for _ in range(2)]
    yield
    for p in loops:
        p.kill()
        p.wait()


def test_a_wait_for_a_cpu_others_hold_is_not_charged(busy_cpu):
    proc = pinned(BUSY)
    try:
        wall, charged = measure(proc)
        cpu = usage(proc.pid)[0]
    finally:
        proc.kill()
        proc.wait()
    assert charged < 0.7 * wall, (wall, charged)  # a third of one CPU, near enough
    assert charged >= wall / STRETCH, (wall, charged)
    assert cpu > 0


def test_a_sleep_is_charged_in_full_on_a_busy_machine(busy_cpu):
    proc = pinned("import time\ntime.sleep(30)")
    try:
        wall, charged = measure(proc)
    finally:
        proc.kill()
        proc.wait()
    assert charged >= 0.95 * wall, (wall, charged)


def test_processes_of_a_hand_in_competing_with_each_other_are_charged_in_full():
    """A kernel that starts busy processes of its own keeps its main thread waiting for a CPU; the CPU its
    processes use is charged, so it earns nothing by it."""
    code = f"import os, subprocess, sys\nfor _ in range(2):\n    subprocess.Popen([sys.executable, '-c', {BUSY!r}])\n{BUSY}"
    proc = pinned(code)
    try:
        time.sleep(0.5)
        assert len(tree(proc.pid)) == 3, tree(proc.pid)
        wall, charged = measure(proc)
    finally:
        for pid in tree(proc.pid)[::-1]:
            os.kill(pid, 9)
        proc.wait()
    assert charged >= 0.85 * wall, (wall, charged)


def test_what_a_process_cannot_be_read_for_is_charged_by_the_wall_clock():
    clock = Clock(2**22 + 12345)  # no such process
    time.sleep(0.3)
    assert clock.charged() == pytest.approx(clock.wall(), abs=0.01)
    assert not clock.past(10) and clock.past(0.1)

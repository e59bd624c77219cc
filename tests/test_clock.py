"""The time a limit charges (kernels/clock.py): a wait for a CPU that other work holds is not charged; a sleep, a
busy loop and processes that compete with each other are, in full.

Each test pins the processes it measures to one CPU with busy loops beside them where it says so, waits until they
have started (they print a line), and reads a :class:`Clock` of them over about a second of wall time."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from attention_course.grading.kernels import cgroups
from attention_course.grading.kernels.clock import STRETCH, Clock, cgroup_cpu, tree, usage

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="Linux's /proc/<pid>/schedstat")

BUSY = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"
SLEEP = "import time\ntime.sleep(30)"
CPU = min(os.sched_getaffinity(0))


def started(code: str, children: int = 0, pin: bool = True) -> subprocess.Popen:
    """A Python that starts ``children`` busy Pythons, says so, then runs ``code``; on :data:`CPU` alone if ``pin``."""
    setup = (f"import subprocess, sys\nfor _ in range({children}):\n"
             f"    subprocess.Popen([sys.executable, '-c', {BUSY!r}])\nprint('ready', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", setup + code], stdout=subprocess.PIPE, text=True,
                            preexec_fn=(lambda: os.sched_setaffinity(0, {CPU})) if pin else None)
    assert proc.stdout.readline().strip() == "ready"
    for _ in range(100):  # the children have started too
        if len(tree(proc.pid)) == children + 1:
            break
        time.sleep(0.05)
    return proc


def stop(proc: subprocess.Popen) -> None:
    for pid in tree(proc.pid)[::-1]:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    proc.wait()


def measure(proc: subprocess.Popen, seconds: float = 1.2, **party) -> tuple[float, float, float]:
    """(wall seconds, seconds charged, CPU seconds the process tree used) over ``seconds``, by a clock of ``proc``
    whose CPU is all counted (``whole``) unless ``party`` says otherwise."""
    pids = tree(proc.pid)
    before = sum(usage(p)[1] for p in pids)
    clock = Clock({"root": proc.pid, "main": proc.pid, "whole": True, **party})
    time.sleep(seconds)
    wall = clock.wall()  # read first: the clock reads its own wall time, a moment later
    charged = clock.charged()
    return wall, charged, sum(usage(p)[1] for p in pids) - before


def measured(code: str, children: int = 0, **party) -> tuple[float, float, float]:
    """:func:`measure` of a process running ``code`` (:func:`started`), stopped after."""
    proc = started(code, children)
    try:
        return measure(proc, **party)
    finally:
        stop(proc)


@pytest.fixture
def busy_cpu():
    """Two busy loops on :data:`CPU`: what a loaded grading machine does to a kernel's share of it."""
    loops = [started(BUSY) for _ in range(2)]
    yield
    for p in loops:
        stop(p)


def test_a_wait_for_a_cpu_others_hold_is_not_charged(busy_cpu):
    wall, charged, used = measured(BUSY)
    assert charged < 0.7 * wall, (wall, charged)  # a third of one CPU at most
    assert charged >= max(wall / STRETCH, used - 0.05), (wall, charged, used)


def test_nothing_is_credited_where_not_all_a_hand_ins_cpu_is_counted(busy_cpu):
    """Without a cgroup counting every process of it, a kernel's children that end unwaited go unseen: its wait
    for a CPU is then charged, as by the wall clock."""
    wall, charged, _ = measured(BUSY, whole=False)
    assert charged >= 0.95 * wall, (wall, charged)


def test_a_main_thread_that_lowers_its_own_priority_earns_nothing(busy_cpu):
    wall, charged, _ = measured("import os\nos.nice(19)\n" + BUSY)
    assert charged >= 0.95 * wall, (wall, charged)


def test_a_sleep_is_charged_in_full_on_a_busy_machine(busy_cpu):
    wall, charged, _ = measured(SLEEP)
    assert charged >= 0.95 * wall, (wall, charged)


def test_a_sleep_beside_a_busy_process_of_its_own_is_charged_in_full(busy_cpu):
    """Only the wait of the thread that runs the cell is not charged: a child of the kernel that waits for a CPU
    beside the busy loops earns its sleeping parent nothing."""
    wall, charged, _ = measured(SLEEP, children=1)
    assert charged >= 0.95 * wall, (wall, charged)


def test_processes_of_a_hand_in_competing_with_each_other_are_charged_in_full():
    """A kernel that starts busy processes of its own keeps its main thread waiting for a CPU; the CPU its
    processes use is charged, so it earns nothing by it (on an idle CPU, the whole wall time; beside other work,
    at least all the CPU the three had)."""
    proc = started(BUSY, children=2)
    try:
        assert len(tree(proc.pid)) == 3, tree(proc.pid)
        wall, charged, used = measure(proc)
    finally:
        stop(proc)
    assert used > 0.1 and charged >= used - 0.05, (wall, charged, used)


def test_a_process_started_from_another_thread_is_in_the_tree():
    code = (f"import subprocess, sys, threading, time\n"
            f"threading.Thread(target=lambda: subprocess.Popen([sys.executable, '-c', {BUSY!r}])).start()\n"
            "time.sleep(30)")
    proc = started(code, pin=False)
    try:
        for _ in range(100):
            if len(tree(proc.pid)) == 2:
                break
            time.sleep(0.05)
        assert len(tree(proc.pid)) == 2, tree(proc.pid)
    finally:
        stop(proc)


#: A main thread that loops beside children of 10 ms each that nobody waits for (SIGCHLD ignored): what they use
#: never reaches a process of the tree, only the cgroup's counter.
UNWAITED = ("import os, signal, time\nsignal.signal(signal.SIGCHLD, signal.SIG_IGN)\nend = time.monotonic() + 30\n"
            "while time.monotonic() < end:\n    if os.fork() == 0:\n        t = time.monotonic() + 0.01\n"
            "        while time.monotonic() < t: pass\n        os._exit(0)\n    t = time.monotonic() + 0.01\n"
            "    while time.monotonic() < t: pass\n")


def test_children_that_end_unwaited_are_charged_through_the_cgroup(busy_cpu):
    groups = cgroups.create(f"attention-clock-{os.getpid()}", 2**30, 64) if os.geteuid() == 0 else cgroups.Cgroups()
    try:
        files = groups.cpu_files()
        if not files:
            pytest.skip("no cgroup counts a process's CPU here (root and a cpu or cpuacct hierarchy)")
        setup = "import os\nos.sched_setaffinity(0, {%d})\n" % CPU
        proc = subprocess.Popen([sys.executable, "-c", setup + "print('ready', flush=True)\n" + UNWAITED],
                                stdout=subprocess.PIPE, text=True, preexec_fn=lambda: cgroups.join(groups.procs_files))
        try:
            assert proc.stdout.readline().strip() == "ready"
            counted = cgroup_cpu(files[0])
            wall, charged, seen = measure(proc, whole=False, cgroups=files)
            counted = cgroup_cpu(files[0]) - counted
        finally:
            stop(proc)
    finally:
        groups.kill()
    if counted <= wall / STRETCH + 0.1:  # so little CPU that the floor alone covers it: nothing to tell apart
        pytest.skip(f"the hand-in had {counted:.2f} s of CPU in {wall:.2f} s: the machine is too busy to tell")
    assert counted > 1.5 * seen, (counted, seen)  # the children are out of the tree's sight
    assert charged >= counted - 0.05, (wall, charged, counted)


def test_what_a_process_cannot_be_read_for_is_charged_by_the_wall_clock():
    clock = Clock({"root": 2**22 + 12345, "main": 2**22 + 12345, "whole": True})  # no such process
    time.sleep(0.3)
    assert clock.charged() == pytest.approx(clock.wall(), abs=0.01)
    assert not clock.past(10) and clock.past(0.1)

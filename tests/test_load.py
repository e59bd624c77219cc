"""A machine busy with other work costs a hand-in nothing: a time limit charges what the hand-in's kernel and judge had
of the machine (kernels/clock.py), not their wait for a CPU that other work holds.

A scratch course of 01 with a 2-second cell limit and a 10-second notebook limit, graded on one CPU beside two busy
loops pinned to it from the grader's first kernel on, each a session of its own (a kernel gets about a third of the
CPU, as on a machine at a third of its speed). One hand-in's four answer cells each need 1 s of CPU at their top
level, and its scaled_scores 1 s more in its first call from a test (the judge waiting for the kernel): 5 s of the
notebook's 10. Its cells, that test and its notebook run past their limits by the wall clock and stay under them in
what they used: it earns every point. A cell that sleeps past the limit is stopped at it on the same loaded machine (a
sleep is charged in full): its hand-in loses the cells that need it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

import pytest
from harness import BIN, descendants, read_scores, released_course

from attention_course.grading.kernels import cgroups
from tools.submissions import Submission, read_notebook, write_class


def cpu_counted() -> bool:
    """Whether a kernel here gets a cgroup that counts its CPU (root, and cgroup v1 cpuacct or v2 cpu): without one
    only the judge's waits are credited (kernels/clock.py), and a loaded machine still costs a kernel its time."""
    if os.geteuid() != 0 or not os.path.exists("/proc/self/schedstat"):
        return False
    groups = cgroups.create(f"attention-load-{os.getpid()}", 2**30, 64)
    try:
        return bool(groups.cpu_files())
    finally:
        groups.kill()


A = "01_self_attention"
CELL_S, CPU_S, NOTEBOOK_S = 2, 1.0, 10
CPU = min(os.sched_getaffinity(0))
SOLUTION = "def scaled_scores(Q, K):\n    d_k = Q.shape[-1]\n    return Q @ K.T / math.sqrt(d_k)\n"
BURN = (f"import time as _t\n_w, _c = _t.monotonic(), _t.process_time()\nwhile _t.process_time() - _c < {CPU_S}:\n"
        f"    pass\nprint(f'wall seconds for {CPU_S} s of CPU: {{_t.monotonic() - _w:.2f}}')\n")
#: The notebook's own cell after the answer calls it once; its second call is the first test's, in the judge's time.
BURN_IN_CALL = ("_calls = []\n\ndef scaled_scores(Q, K):\n    _calls.append(1)\n    if len(_calls) == 2:\n"
                + "".join("        " + line + "\n" for line in BURN.splitlines()[:-1])
                + "    d_k = Q.shape[-1]\n    return Q @ K.T / math.sqrt(d_k)\n")
#: Four answer cells that each burn CPU_S at their top level (these three and scaled_scores), and scaled_scores that
#: burns CPU_S more in its first call from a test: 5 s of CPU, under NOTEBOOK_S in what the notebook used, and past it by the wall clock on the loaded CPU.
THREE = ("project_qkv", "softmax", "self_attention")
ROSTER = {
    "burns": Submission("burns", f"{CPU_S} s of CPU before each of four answers, and in a test's call",
                        replace={"scaled_scores": BURN + BURN_IN_CALL}, transform=lambda nbs: burn_before(nbs, THREE)),
    "sleeps": Submission("sleeps", "sleeps past the limit before its answer",
                         replace={"scaled_scores": f"import time\ntime.sleep({3 * CELL_S})\n" + SOLUTION}),
}
BUSY = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end: pass"


def burn_before(notebooks: dict, grade_ids) -> dict:
    for nb in notebooks.values():
        for c in nb["cells"]:
            if c["metadata"].get("nbgrader", {}).get("grade_id") in grade_ids:
                c["source"] = BURN + "".join(c["source"])
    return notebooks


def pin():
    os.sched_setaffinity(0, {CPU})


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """The class graded with the grader, its kernels and two busy loops on one CPU."""
    if not cpu_counted():
        pytest.skip("no cgroup counts a kernel's CPU on this host")
    course = released_course(tmp_path_factory.mktemp("load"), [A])
    with open(course / "nbgrader_config.py", "a") as f:
        f.write(f"\nc.JudgedExecute.timeout = {CELL_S}\nc.JudgedExecute.notebook_timeout = {NOTEBOOK_S}\n")
    write_class(course, A, ROSTER)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    loops = []
    with tempfile.TemporaryFile("w+") as err:
        run = subprocess.Popen([sys.executable, "-m", "attention_course.grading", "--course", str(course), "autograde",
                                "-j", "1"], cwd=course, env=env, stdout=subprocess.DEVNULL, stderr=err, text=True,
                               preexec_fn=pin)
        try:
            # the loops start with the grader's first kernel (started before the first hand-in's cells): what they
            # would take from the grader's own start-up (its imports, the gradebook, the sandbox's probe) tries no
            # limit, and would hold a core of the rest of the suite for its length. Each loop a session of its own:
            # where the scheduler groups sessions (autogroup), loops of one session would share one session's
            # weight against the kernel's cgroup, however many they were.
            while run.poll() is None and not forked_kernel(run.pid):
                time.sleep(0.05)
            loops = [subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=pin, start_new_session=True)
                     for _ in range(2)]
            run.wait()
        finally:
            for p in [*loops, run]:
                p.kill()
                p.wait()
        err.seek(0)
        assert run.returncode == 0, err.read()[-3000:]
    assert loops, "the grader ended before it started a kernel"
    return course, read_scores(course, A)


def forked_kernel(root: int) -> bool:
    """Whether a process below ``root`` was forked by a zygote (kernels/forkserver.py): a kernel or a judge."""
    found = {}  # pid -> (command line, parent)
    for pid in descendants(root):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            found[pid] = (open(f"/proc/{pid}/cmdline", "rb").read(), int(stat.rsplit(")", 1)[1].split()[1]))
        except (OSError, IndexError, ValueError):
            pass
    zygote = lambda pid: b"f.zygote" in found.get(pid, (b"", 0))[0]  # noqa: E731
    return any(zygote(pid) and zygote(parent) for pid, (_, parent) in found.items())


def cell(course, student: str, grade_id: str) -> dict:
    nb = read_notebook(course / "autograded" / student / A / "self_attention.ipynb")
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def text(c: dict) -> str:
    return "".join(str(o.get("text", "")) + str(o.get("ename", "")) + str(o.get("evalue", "")) for o in c["outputs"])


def test_work_slowed_past_the_limit_by_other_work_earns_every_point(loaded):
    course, scores = loaded
    out = text(cell(course, "burns", "scaled_scores"))
    wall = re.search(r"wall seconds for [\d.]+ s of CPU: ([\d.]+)", out)
    assert wall, out  # the cell ran to its end
    assert float(wall.group(1)) > CELL_S, f"the busy loops did not slow the kernel past the limit: {out}"
    lost = {g: (s, m) for g, (s, m, _) in scores["burns"].items() if g.startswith("test_") and s < m}
    assert not lost, f"burns lost {lost}"


def test_a_sleep_past_the_limit_is_stopped_on_a_loaded_machine_too(loaded):
    course, scores = loaded
    out = text(cell(course, "sleeps", "scaled_scores"))
    assert "CellTimeoutError" in out and f"longer than {CELL_S} s" in out, out
    assert scores["sleeps"]["test_scores_values"][0] == 0, scores["sleeps"]

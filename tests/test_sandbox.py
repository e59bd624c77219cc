"""The kernel sandbox holds on any Linux host: as root and as an ordinary user, with cgroups and without.

Each run boots real kernels in the course's sandbox and attacks them (tests/tools/sandbox_attacks.py): a
memory bomb, 300 detached double-forked sleepers, a fork bomb and a 3 GiB write into its working folder must
each be stopped, the kernel must not run as root, and nothing it started may be running or written once it
is closed. Then the isolation attacks: shared memory, message queues and semaphores one kernel leaves are not
seen by a kernel beside it nor by one started after it, and the host's shared memory is what it was; the course
is read by name and by search and nothing of it is found; the grader's Unix sockets (by path, 0777, and by
abstract name) are not reached; no mode, owner, time or attribute changes outside the kernel's scratch file
system, whoever owns the file; the grader's session keyring is not read. The ordinary-user runs grade as a user
the test creates (tests/conftest.py, ``grader_user``), whose kernels own their scratch folders.
This host binds memory, pids and cpu to cgroup v1, so the cgroup v2 path is checked against a fake cgroupfs tree
(files written, processes moved and killed). A CPU hog (48 busy children, each calling setsid()) gets at most its
kernel's share: a quota with its cpu cgroup; without, its children stay in the kernel's session (the scheduler's
group); its cells still time out.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from attention_course.grading.course import ROOT
from attention_course.grading.kernels import cgroups
from attention_course.grading.run import doctor

TOOLS = ROOT / "tests" / "tools"


def attack(mode: str, user: int | None, tmp_path: Path, *more: str) -> dict:
    cmd = [sys.executable, str(TOOLS / "sandbox_attacks.py"), mode, *more] + (["--no-isolation"] if mode == "cgroups" else [])
    proc = subprocess.run(as_ordinary_user(cmd, tmp_path, user) if user else cmd, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


RUNS = [pytest.param("cgroups", False, id="root-with-cgroups"), pytest.param("no-cgroups", False, id="root-no-cgroups"),
        pytest.param("no-cgroups", True, id="ordinary-user")]


@pytest.mark.parametrize("mode,as_user", RUNS)
def test_every_attack_is_stopped_and_leaves_nothing(mode, as_user, tmp_path, grader_user):
    if not as_user and os.geteuid() != 0:
        pytest.skip("grading as root needs root")
    found = attack(mode, grader_user if as_user else None, tmp_path)
    facts = found["facts"]
    assert facts["uid"] != 0 and "uid 0 " not in found["whoami"]["text"], facts
    assert {"mount", "network", "pid", "ipc"} <= set(facts["namespaces"]) and facts["view"] and facts["seccomp"], facts
    assert facts["scratch_bytes"] == 128 * 2**20 and facts["nproc"] <= 64 and facts["landlock"] >= 1, facts
    assert bool(found["cgroups"]) == (mode == "cgroups"), found["cgroups"]
    assert "stopped at" in found["memory"]["text"], found["memory"]
    assert "fork refused" in found["fork_bomb"]["text"], found["fork_bomb"]
    assert found["running_before_close"] <= 64 + 8, "more processes ran than the process cap allows"
    stopped = found["scratch"]["text"]
    assert "No space left" in stopped and int(stopped.split()[2]) <= 128, stopped
    assert all(found[a]["alive"] for a in ("memory", "sleepers", "fork_bomb", "scratch")), found
    assert found["left_running"] == [], f"processes outlived the kernel: {found['left_running']}"
    assert not found["scratch_left"], "the kernel's scratch folder outlived it"
    if mode != "cgroups":  # the isolation attacks owe nothing to cgroups: run without them, as root and as a user
        isolated(found["isolation"], as_user)


@pytest.mark.slow
@pytest.mark.parametrize("mode,as_user", [RUNS[0], RUNS[2]])  # the quota, and one session (root's is the same code)
def test_a_cpu_hog_gets_at_most_its_kernels_share_and_its_cells_still_time_out(mode, as_user, tmp_path, grader_user):
    """48 busy children that each call setsid(): their CPU time against the wall clock (from /proc, outside the
    kernel) and their nice values; then the hog's own cells. (How much the hog slows a class graded beside it is
    `make bench`'s: tools/bench_hog.py.)"""
    if not as_user and os.geteuid() != 0:
        pytest.skip("grading as root needs root")
    found = attack("hog", grader_user if as_user else None, tmp_path, mode)
    cpu = found["facts"]["cpu"]
    assert cpu["share"] == ("cgroup" if mode == "cgroups" else "session") and cpu["nice_limit"] == 0, cpu
    assert found["threads"]["text"].strip() == "1", found["threads"]  # torch: one thread in a one-core share
    assert found["start"]["text"] == "started 48\n", found["start"]
    if mode == "cgroups":  # a quota: one core at most, even on an idle machine
        assert found["alone"] <= 1.1, found
    else:  # one session (the scheduler's group, where it groups sessions) for the kernel and all its children
        assert len(found["sessions"]) == 1 and "refused" in found["renice"]["text"], found
    if found["facts"].get("seccomp"):  # the ordinary policy only: no batch or idle policy to hide its waits behind
        assert "refused" in found["batch"]["text"] and "policy 0" in found["batch"]["text"], found["batch"]
    assert found["after"]["text"] == "4999950000\n", found["after"]  # the kernel works on in its share
    assert found["busy_cell"]["status"] == "timeout" and found["busy_cell"]["seconds"] < 20, found["busy_cell"]
    assert found["left_running"] == [], found["left_running"]


def printed(run: dict, word: str):
    """What a kernel printed after ``word`` (a Python literal or JSON), its run having ended well."""
    assert run["status"] == "ok", run
    text = run["text"].split(f"{word} ", 1)[1].strip()
    return json.loads(text) if text.startswith("{") else __import__("ast").literal_eval(text.split(" walked")[0])


def isolated(iso: dict, as_user: bool) -> None:
    made = printed(iso["leave"], "made")
    assert {"sysv-shm", "sysv-msg", "sysv-sem", "posix-shm"} <= set(made), made  # the attack itself works ...
    assert set(printed(iso["take_own"], "found")) >= set(made), iso["take_own"]  # ... and so does looking for it
    assert printed(iso["take_same_run"], "found") == [], "a kernel saw what the kernel beside it left"
    assert printed(iso["take_next_run"], "found") == [], "a kernel saw what a kernel of an earlier run left"
    for when in ("ipc_while_running", "ipc_after"):
        assert iso[when]["ours"] == [], f"the host holds what a kernel made ({when}): {iso[when]}"
    assert abs(iso["ipc_after"]["sysv_bytes"] - iso["ipc_before"]["sysv_bytes"]) < 2**20, iso
    assert printed(iso["course"], "found") == [], "a kernel read the course"
    reach = printed(iso["reach"], "reach")
    assert all(r != "connected" for r in reach["sockets"].values()) and iso["connected"] == 3, reach
    assert reach["tried"] > 1000 and reach["changed"] == [], reach["changed"][:20]
    if as_user:  # the kernel runs as the grader's user: it owns its scratch folder, the walls hold all the same
        assert reach["owned"] > 0, reach
    assert all(iso["unchanged"].values()) and not any(iso["xattrs"].values()), iso["unchanged"]
    assert reach["keyring"] != "found" and iso["keyring_planted"], reach


def fake_v2(tmp_path: Path, enabled: str) -> Path:
    root = tmp_path / "cgroupfs"
    (root / "grading").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    (root / "grading" / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "grading" / "cgroup.subtree_control").write_text(enabled + "\n")
    return root


def test_cgroup_v2_caps_are_written_and_processes_moved_and_killed(tmp_path):
    root = fake_v2(tmp_path, "memory pids")
    where = cgroups.layout(root, "0::/grading\n")
    assert where.places == {"memory": (2, root / "grading"), "pids": (2, root / "grading")} and where.version == "v2"
    made = cgroups.create("kernel-1", 3 * 2**30, 64, root, "0::/grading\n")
    kernel = root / "grading" / "kernel-1"
    assert (kernel / "memory.max").read_text() == str(3 * 2**30) and (kernel / "pids.max").read_text() == "64"
    assert made.procs_files == [str(kernel / "cgroup.procs")]
    sleeper = subprocess.Popen(["sleep", "60"])
    reaper = threading.Thread(target=sleeper.wait)  # reaped at once: no zombie left for kill() to signal
    reaper.start()
    assert cgroups.join(made.procs_files, sleeper.pid) == []
    assert (kernel / "cgroup.procs").read_text() == str(sleeper.pid)
    (kernel / "pids.events").write_text("max 3\n")
    assert made.cap_hits() == 3
    made.kill()
    assert (kernel / "cgroup.kill").read_text() == "1"
    reaper.join(10)
    assert sleeper.returncode == -9, "the process in the kernel's cgroup was not killed"


def test_cgroup_v2_without_delegated_controllers_says_how_to_delegate(tmp_path):
    root = fake_v2(tmp_path, "")
    where = cgroups.layout(root, "0::/grading\n")
    assert not where.places and any("subtree_control" in n for n in where.notes), where.notes
    assert cgroups.create("kernel-1", 2**30, 64, root, "0::/grading\n").dirs == []


def test_a_hybrid_host_takes_each_controller_where_it_is_bound(tmp_path):
    """Like this host: memory and pids on v1 hierarchies, a v2 hierarchy with no controllers."""
    root = tmp_path / "cgroupfs"
    for controller in ("memory", "pids"):
        (root / controller / "svc").mkdir(parents=True)
    (root / "unified").mkdir()
    (root / "unified" / "cgroup.controllers").write_text("\n")
    where = cgroups.layout(root, "9:pids:/svc\n4:memory:/svc\n0::/\n")
    assert where.places == {"memory": (1, root / "memory" / "svc"), "pids": (1, root / "pids" / "svc")}
    made = cgroups.create("k", 2**30, 64, root, "9:pids:/svc\n4:memory:/svc\n0::/\n")
    assert (root / "memory" / "svc" / "k" / "memory.limit_in_bytes").read_text() == str(2**30)
    assert (root / "pids" / "svc" / "k" / "pids.max").read_text() == "64" and len(made.dirs) == 2


def test_a_kernels_cpu_share_is_a_quota_of_one_core_with_the_weight_of_one_process(tmp_path):
    root = fake_v2(tmp_path, "cpu memory pids")
    made = cgroups.create("kernel-1", 2**30, 64, root, "0::/grading\n")
    kernel = root / "grading" / "kernel-1"
    assert (kernel / "cpu.max").read_text() == "100000 100000" and (kernel / "cpu.weight").read_text() == "100"
    assert cgroups.cpu_cap(made.procs_files) == 1.0 and (kernel / "pids.max").read_text() == "64"
    (kernel / "cpu.stat").write_text("usage_usec 1500000\nnr_periods 40\nnr_throttled 12\n")
    assert made.cpu_stat() == {"usage_usec": 1500000, "nr_periods": 40, "nr_throttled": 12}
    v1 = tmp_path / "v1"  # like this host: cpu on a v1 hierarchy of its own
    (v1 / "cpu" / "svc").mkdir(parents=True)
    made = cgroups.create("k", 2**30, 64, v1, "1:cpu:/svc\n0::/\n", cpu_cores=0.5)
    assert [(f, (v1 / "cpu" / "svc" / "k" / f).read_text()) for f in ("cpu.shares", "cpu.cfs_quota_us")] == \
        [("cpu.shares", "1024"), ("cpu.cfs_quota_us", "50000")] and cgroups.cpu_cap(made.procs_files) == 0.5
    assert cgroups.cpu_cap([]) is None


def test_a_kernel_is_one_session_where_no_cpu_cgroup_holds(tmp_path):
    """Without a cpu cgroup a kernel's share is its session's, where the scheduler groups sessions (Linux's
    autogroup): :func:`cgroups.autogroup` reads the host's switch, and the doctor says which holds."""
    switch = tmp_path / "sched_autogroup_enabled"
    switch.write_text("1\n")
    assert cgroups.autogroup(str(switch))
    switch.write_text("0\n")
    assert not cgroups.autogroup(str(switch)) and not cgroups.autogroup(str(tmp_path / "none"))
    assert doctor.cpu_text({"share": "session", "threads": 1}, "1 core").startswith("no cpu cgroup: each kernel is")
    assert "may take every core" in doctor.cpu_text({"share": "none"}, "1 core")


def as_ordinary_user(cmd: list[str], tmp_path: Path, user: int) -> list[str]:
    """``cmd`` run as the ordinary user ``user`` when these tests run as root (tests/tools/as_user.py)."""
    if os.geteuid() != 0:
        return cmd
    tmp = tmp_path / "user-tmp"
    tmp.mkdir(exist_ok=True)
    os.chmod(tmp_path, 0o755)
    os.chmod(tmp, 0o1777)
    reach = [os.path.realpath(sys.base_prefix), sys.prefix, str(ROOT), str(tmp)]
    return [sys.executable, str(TOOLS / "as_user.py"), "--user", str(user), ":".join(reach), "--", "env",
            f"TMPDIR={tmp}", f"HOME={tmp}", "PYTHONDONTWRITEBYTECODE=1", *cmd]


REMOVE_CLOSED = """
import os, stat, sys
from attention_course.grading.kernels import scratch
base = sys.argv[1]
folder = os.path.join(base, "attention-judge-x")
for sub in ("rw/closed", "rw/ro"):
    os.makedirs(os.path.join(folder, sub))
    open(os.path.join(folder, sub, "answer.txt"), "w").write("42")
os.chmod(os.path.join(folder, "rw", "ro"), 0o500)
os.chmod(os.path.join(folder, "rw", "closed"), 0)
os.chmod(folder, 0)
scratch.remove(folder)
scratch.remove(folder)
print(os.path.lexists(folder), oct(stat.S_IMODE(os.stat(base).st_mode)))
"""


def test_a_scratch_its_kernel_closed_is_removed_by_an_ordinary_grader(tmp_path, grader_user):
    """A kernel of an ordinary grader runs as the grader's user and may close folders of its scratch (chmod 0, the
    scratch itself included): the grader still removes it all, and the temporary folder keeps its 1777."""
    cmd = [sys.executable, "-c", REMOVE_CLOSED, str(tmp_path / "user-tmp")]
    if os.geteuid() != 0:
        (tmp_path / "user-tmp").mkdir(mode=0o1777)
    proc = subprocess.run(as_ordinary_user(cmd, tmp_path, grader_user), capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False", "0o1777"], proc.stdout


@pytest.mark.parametrize("as_user", [False, True], ids=["root", "ordinary-user"])
def test_doctor_reports_every_layer(as_user, tmp_path, grader_user):
    if not as_user and os.geteuid() != 0:
        pytest.skip("grading as root needs root")
    cmd = [sys.executable, "-m", "attention_course.grading", "doctor"]
    proc = subprocess.run(as_ordinary_user(cmd, tmp_path, grader_user) if as_user else cmd, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = {layer: mark for mark, layer in re.findall(r"\[\s*(ok|--|MISSING)\s*\] (\w+)", proc.stdout)}
    assert set(rows) == {"user", "namespaces", "view", "scratch", "limits", "landlock", "cgroups", "seccomp", "cpu"}, \
        proc.stdout
    assert all(rows[layer] == "ok" for layer in doctor.REQUIRED) and rows["cpu"] == "ok", proc.stdout
    assert "refuses" not in proc.stdout, proc.stdout
    cpu = re.search(r"\] cpu +(.*)", proc.stdout).group(1)
    if not as_user:
        assert "kernels run as uid 16" in proc.stdout and rows["cgroups"] == "ok", proc.stdout
        assert cpu.startswith("a cpu cgroup per kernel"), cpu
    else:  # cgroups are not delegated to an ordinary user here
        assert cpu.startswith("no cpu cgroup: each kernel is a session of its own"), cpu

"""Per-kernel cgroups: a memory and a process cap and a share of the CPU where the host delegates them; and the
CPU share where it does not (:func:`watch`).

cgroup v1 (a hierarchy per controller, ``/sys/fs/cgroup/memory/...``) and cgroup v2 (one unified
hierarchy, a subtree delegated to the grader with ``memory``, ``pids`` and ``cpu`` enabled in its
``cgroup.subtree_control``) are both used; each controller is taken from wherever the host binds it.
Every function takes the cgroupfs root and the text of ``/proc/self/cgroup`` as arguments, so that the
v2 path can be tested against a fake cgroupfs tree on hosts that bind their controllers to v1.

**A kernel's share of the CPU** is :data:`CPU_CORES` (one core): its processes together, however many, in a
``cpu`` cgroup of its own that none can leave, get at most that much CPU time (a CFS quota:
``cpu.cfs_quota_us`` or ``cpu.max``) with the weight of one ordinary process (``cpu.shares`` 1024,
``cpu.weight`` 100). Where no ``cpu`` controller is delegated (an ordinary grader, usually), the sandbox starts
:func:`watch` in the kernel's PID namespace: once the kernel's processes together have used more than
:data:`HOG_CORES` over :data:`HOG_WINDOW` seconds, every one of them runs at nice :data:`HOG_NICE` for the rest
of the kernel's life (the sandbox sets ``RLIMIT_NICE`` to 0: none can lower it again, and children inherit it;
``setsid`` does nothing in a kernel, so none leaves its session's scheduler group, whose nice is set too).
That is no cap: such a kernel still takes CPU no one else wants, but it yields to every other process.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")
#: A kernel's share of the CPU, in cores: what its processes together may use (the cgroup's quota).
CPU_CORES = 1.0
CPU_PERIOD_US = 100_000
#: Without a cpu cgroup: a kernel whose processes together used more than ``HOG_CORES`` cores over the last
#: ``HOG_WINDOW`` seconds has every process put at nice ``HOG_NICE``. One process cannot use more than one core;
#: an honest notebook never comes near it (torch and BLAS get :func:`use_threads` threads in a kernel).
HOG_CORES = 1.2
HOG_WINDOW = 2.0
HOG_NICE = 19


@dataclass
class Layout:
    """Where this process's memory, pids and cpu controllers live: ``{controller: (version, folder)}``."""

    places: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def version(self) -> str:
        versions = sorted({v for v, _ in self.places.values()})
        return "+".join(f"v{v}" for v in versions) if versions else "none"


def _v2_root(root: Path) -> Path | None:
    for candidate in (root, root / "unified"):
        if (candidate / "cgroup.controllers").is_file():
            return candidate
    return None


def layout(root: Path = ROOT, self_cgroup: str | None = None) -> Layout:
    """Find, for each controller, the folder under which this process may create child cgroups."""
    if self_cgroup is None:
        try:
            self_cgroup = Path("/proc/self/cgroup").read_text()
        except OSError:
            return Layout(notes=["/proc/self/cgroup cannot be read: no cgroups"])
    found = Layout()
    unified = None
    for line in self_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            unified = path
            continue
        for controller in controllers.split(","):
            if controller in CONTROLLERS:
                base = root / controller / path.lstrip("/")
                if base.is_dir() and os.access(base, os.W_OK):
                    found.places[controller] = (1, base)
                else:
                    found.notes.append(f"cgroup v1 {controller} folder {base} is not writable")
    v2 = _v2_root(root)
    missing = [c for c in CONTROLLERS if c not in found.places]
    if missing and unified is not None and v2 is not None:
        base = v2 / unified.lstrip("/")
        try:
            enabled = set((base / "cgroup.subtree_control").read_text().split())
            available = set((base / "cgroup.controllers").read_text().split())
        except OSError:
            enabled, available = set(), set()
        for controller in missing:
            if controller in enabled and os.access(base, os.W_OK):
                found.places[controller] = (2, base)
            elif controller in available:
                found.notes.append(
                    f"cgroup v2: {controller} is not enabled for the children of {base} (delegate a subtree to the "
                    f"grader and write '+{controller}' to its cgroup.subtree_control)")
            else:
                found.notes.append(f"cgroup v2: {controller} is not delegated to {base}")
    elif missing:
        found.notes.append(f"no cgroup {' or '.join(missing)} controller is available")
    return found


@dataclass
class Cgroups:
    """The cgroups of one kernel; empty when the host delegates none."""

    dirs: list = field(default_factory=list)  # (version, controller, folder)

    @property
    def procs_files(self) -> list[str]:
        return sorted({str(d / "cgroup.procs") for _, _, d in self.dirs})

    def cap_hits(self) -> int:
        """How often the kernel ran into its process cap so far (``pids.events``, v1 and v2 alike)."""
        hits = 0
        for _, controller, d in self.dirs:
            if controller != "pids":
                continue
            try:
                for line in (d / "pids.events").read_text().splitlines():
                    if line.startswith("max "):
                        hits += int(line.split()[1])
            except (OSError, ValueError):
                pass
        return hits

    def cpu_stat(self) -> dict:
        """The kernel's ``cpu.stat`` (``nr_throttled``: periods its quota stopped it; v2: ``usage_usec``, the CPU
        time its processes used), with ``usage_usec`` from ``cpuacct.usage`` where a v1 host mounts cpuacct with
        cpu; empty without a cpu cgroup."""
        for _, controller, d in self.dirs:
            if controller != "cpu":
                continue
            stat = {}
            try:
                for line in (d / "cpu.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    stat[key] = int(value)
                if (d / "cpuacct.usage").is_file():
                    stat.setdefault("usage_usec", int((d / "cpuacct.usage").read_text()) // 1000)
            except (OSError, ValueError):
                pass
            return stat
        return {}

    def kill(self) -> None:
        """Kill every process in the kernel's cgroups and remove them."""
        for version, _, d in self.dirs:
            if version == 2:
                try:
                    (d / "cgroup.kill").write_text("1")
                except OSError:
                    pass
            for _ in range(250):
                try:
                    pids = [int(p) for p in (d / "cgroup.procs").read_text().split()]
                except (OSError, ValueError):
                    break
                alive = []
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        alive.append(pid)
                    except OSError:
                        pass
                if not alive:
                    break
                time.sleep(0.01)
            try:
                d.rmdir()
            except OSError:
                pass


def create(name: str, memory_bytes: int, processes: int, root: Path = ROOT,
           self_cgroup: str | None = None, cpu_cores: float = CPU_CORES) -> Cgroups:
    """Child cgroups named ``name`` with the kernel's caps, under wherever each controller is delegated."""
    made = Cgroups()
    where = layout(root, self_cgroup)
    quota = max(1000, int(cpu_cores * CPU_PERIOD_US))
    limits = {1: {"memory": [("memory.limit_in_bytes", memory_bytes)], "pids": [("pids.max", processes)],
                  "cpu": [("cpu.shares", 1024), ("cpu.cfs_period_us", CPU_PERIOD_US), ("cpu.cfs_quota_us", quota)]},
              2: {"memory": [("memory.max", memory_bytes), ("memory.swap.max", 0)], "pids": [("pids.max", processes)],
                  "cpu": [("cpu.weight", 100), ("cpu.max", f"{quota} {CPU_PERIOD_US}")]}}
    for controller, (version, base) in sorted(where.places.items()):
        target = base / name
        shared = any(d == target for _, _, d in made.dirs)  # v2: one folder for every controller
        try:
            target.mkdir(exist_ok=True)
            for filename, value in limits[version][controller]:
                path = target / filename
                if version == 2 and filename == "memory.swap.max" and not path.exists():
                    continue
                path.write_text(str(value))
        except OSError:
            if not shared:
                try:
                    target.rmdir()
                except OSError:
                    pass
            continue
        made.dirs.append((version, controller, target))
    return made


def cpu_cap(procs_files: list[str]) -> float | None:
    """The cores the cpu cgroup among ``procs_files`` (a kernel's, :attr:`Cgroups.procs_files`) caps its processes
    at, read from its quota (``cpu.cfs_quota_us`` / ``cpu.max``); None where none of them is one with a quota."""
    for procs in procs_files:
        folder = Path(procs).parent
        try:
            if (folder / "cpu.max").is_file():
                quota, period = (folder / "cpu.max").read_text().split()[:2]
            elif (folder / "cpu.cfs_quota_us").is_file():
                quota = (folder / "cpu.cfs_quota_us").read_text().strip()
                period = (folder / "cpu.cfs_period_us").read_text().strip()
            else:
                continue
            if quota not in ("max", "-1"):
                return int(quota) / int(period)
        except (OSError, ValueError):
            continue
    return None


def join(procs_files: list[str], pid: int | None = None) -> list[str]:
    """Move ``pid`` (default: this process) into each cgroup; returns what could not be done."""
    notes = []
    for procs in procs_files:
        try:
            with open(procs, "w") as f:
                f.write(str(pid or os.getpid()))
        except OSError as exc:
            notes.append(f"could not join cgroup {procs}: {exc}")
    return notes


# -- the CPU share without a cpu cgroup ---------------------------------------------------------
def use_threads(cores: float) -> int:
    """Give torch, OpenMP and BLAS as many threads as a kernel of ``cores`` cores has (at least one): more would only
    contend for its share. Returns that number."""
    threads = max(1, int(cores))
    os.environ.update({name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
    if "torch" in sys.modules:  # a kernel forked from the fork server: torch is imported, its threads not yet used
        sys.modules["torch"].set_num_threads(threads)
    return threads


def scan(proc: str = "/proc", skip: int = 0) -> dict:
    """Every process ``proc`` shows but ``skip``: ``{pid: (ppid, CPU ticks of its own (all its threads, live or
    gone), CPU ticks of the children it waited for, state)}``."""
    found = {}
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == skip:
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as f:
                rest = f.read().rsplit(b")", 1)[1].split()
            found[int(name)] = (int(rest[1]), int(rest[11]) + int(rest[12]), int(rest[13]) + int(rest[14]),
                                rest[0].decode())
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return found


def cpu_used(before: dict, after: dict) -> int:
    """CPU ticks the processes of two :func:`scan` s used between them: each process's growth (a new one's whole
    time), less what a parent took over from a child it waited for that was already counted."""
    used = 0
    for pid, (_, own, waited, _) in after.items():
        was = before.get(pid)
        used += own + waited - (was[1] + was[2] if was else 0)
    for pid, (ppid, own, waited, _) in before.items():
        if pid not in after and ppid in after and ppid in before:  # gone: counted, unless its parent never waited
            took = after[ppid][2] - before[ppid][2]
            used -= max(0, min(own + waited, took))
    return max(0, used)


def hog(samples: list, window: float = HOG_WINDOW, cores: float = HOG_CORES) -> bool:
    """Whether ``samples`` (``(seconds, CPU seconds used, processes running)`` per tick, the latest last) show a
    kernel above ``cores`` over the last ``window`` seconds: by the CPU time its processes used, or by how many of
    them were running (which also sees processes too short-lived for their time to be read)."""
    span, used, running, ticks = 0.0, 0.0, 0, 0
    for seconds, cpu, runs in reversed(samples):
        span, used, running, ticks = span + seconds, used + cpu, running + runs, ticks + 1
        if span >= window:
            return used > cores * span or running > cores * ticks
    return False


def penalise(proc: str = "/proc", skip: int = 0, nice: int = HOG_NICE) -> int:
    """Put every thread of every process ``proc`` shows but ``skip`` at ``nice`` (their children inherit it), and the
    scheduler's group of its session where sessions are grouped (``autogroup``: a kernel's processes cannot start a
    session of their own, :func:`.sandbox.apply`); returns how many could not be (gone meanwhile aside)."""
    failed = 0
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == skip:
            continue
        try:  # the kernel may change its group's nice 10 times a second at most: only where it is not yet so
            with open(f"{proc}/{name}/autogroup", "r+") as f:
                if not f.read().rstrip().endswith(f" nice {nice}"):
                    f.write(str(nice))
        except FileNotFoundError:  # gone, or a host without autogroups
            pass
        except OSError:
            failed += 1
        try:
            threads = os.listdir(f"{proc}/{name}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                if os.getpriority(os.PRIO_PROCESS, int(tid)) < nice:
                    os.setpriority(os.PRIO_PROCESS, int(tid), nice)
            except ProcessLookupError:
                pass
            except OSError:
                failed += 1
    return failed


def start_watch(confine, in_child) -> list[str]:
    """Make this process (process 1 of a kernel's PID namespace) the kernel's CPU watchdog, :func:`watch`, and return
    in its child (after ``in_child()``), which goes on to become the kernel; the watchdog first calls ``confine()``.
    As the namespace's first process it reaps its orphans, its kernel's processes cannot signal it, and it exits with
    the kernel's status when the kernel ends (and with it every process of the namespace). Returns what could not
    be done."""
    try:
        kernel = os.fork()
    except OSError as exc:
        return [f"no CPU watchdog ({exc}): a kernel's processes together may take every core"]
    if kernel == 0:
        in_child()
        return []
    status = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the grader interrupts the kernel's process group
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
        os.closerange(3, 4096)
        confine()
        status = watch(kernel)
    finally:
        os._exit(status)


def watch(kernel: int, proc: str = "/proc", tick: float = 0.25) -> int:
    """The CPU share of a kernel without a cpu cgroup, from its namespace's first process (:func:`start_watch`):
    every ``tick`` seconds, read what the namespace's processes used; once they are a :func:`hog`, keep every one of
    them (those started since too) at nice :data:`HOG_NICE`. Reaps every process that ends; returns the exit status
    for the kernel's when it ends."""
    me, hz = os.getpid(), os.sysconf("SC_CLK_TCK")
    before, then, samples, hogging = scan(proc, me), time.monotonic(), [], False
    while True:
        signal.sigtimedwait([signal.SIGCHLD], tick)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return 1
            if pid == kernel:
                code = os.waitstatus_to_exitcode(status)
                return code if code >= 0 else 128 - code
            if pid == 0:
                break
        if time.monotonic() - then < tick:
            continue
        try:
            after, now = scan(proc, me), time.monotonic()
            samples = (samples + [(now - then, cpu_used(before, after) / hz,
                                   sum(1 for p in after.values() if p[3] == "R"))])[-64:]
            before, then = after, now
            hogging = hogging or hog(samples)
            if hogging:
                penalise(proc, me)
        except Exception:  # noqa: BLE001  (the watchdog keeps watching whatever a kernel does to /proc)
            pass  # the next reading covers this tick too

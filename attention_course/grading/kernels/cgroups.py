"""Per-kernel cgroups: a memory and a process cap and a share of the CPU where the host delegates them.

cgroup v1 (a hierarchy per controller, ``/sys/fs/cgroup/memory/...``) and cgroup v2 (one unified
hierarchy, a subtree delegated to the grader with ``memory``, ``pids`` and ``cpu`` enabled in its
``cgroup.subtree_control``) are both used; each controller is taken from wherever the host binds it.
Every function takes the cgroupfs root and the text of ``/proc/self/cgroup`` as arguments, so that the
v2 path can be tested against a fake cgroupfs tree on hosts that bind their controllers to v1.

**A kernel's share of the CPU** is :data:`CPU_CORES` (one core): its processes together, however many, in a
``cpu`` cgroup of its own that none can leave, get at most that much CPU time (a CFS quota:
``cpu.cfs_quota_us`` or ``cpu.max``) with the weight of one ordinary process (``cpu.shares`` 1024,
``cpu.weight`` 100). Where no ``cpu`` controller is delegated (an ordinary grader, usually), a kernel is a session
of its own and ``setsid`` does nothing in it (:func:`.sandbox.apply`): where the host's scheduler groups sessions
(:func:`autogroup`, Linux's default), its processes together get one session's share, however many they are.
That is no cap: such a kernel still takes CPU no one else wants.
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
#: Taken where a v1 host mounts it apart from ``cpu`` (v2 counts CPU time in ``cpu.stat``): nothing is capped, it only
#: counts the CPU time of every process of the kernel, which :mod:`.clock` charges.
ACCOUNTING = ("cpuacct",)
#: A kernel's share of the CPU, in cores: what its processes together may use (the cgroup's quota).
CPU_CORES = 1.0
CPU_PERIOD_US = 100_000


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
            if controller in CONTROLLERS or controller in ACCOUNTING:
                base = root / controller / path.lstrip("/")
                if base.is_dir() and os.access(base, os.W_OK):
                    found.places[controller] = (1, base)
                elif controller in CONTROLLERS:
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

    def cpu_files(self) -> list[str]:
        """The file that counts the CPU time of every process of the kernel (:func:`.clock.cgroup_cpu`): v2
        ``cpu.stat``, v1 ``cpuacct.usage`` (with cpu or apart); none without either."""
        names = {(2, "cpu"): "cpu.stat", (1, "cpu"): "cpuacct.usage", (1, "cpuacct"): "cpuacct.usage"}
        for version, controller, d in self.dirs:
            name = names.get((version, controller))
            if name and (d / name).is_file():
                return [str(d / name)]
        return []

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
                  "cpu": [("cpu.shares", 1024), ("cpu.cfs_period_us", CPU_PERIOD_US), ("cpu.cfs_quota_us", quota)],
                  "cpuacct": []},
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


def holds(counter: str, pid: int) -> bool:
    """Whether the cgroup of ``counter`` (a file in its folder, :meth:`Cgroups.cpu_files`) holds the process."""
    try:
        return str(pid) in (Path(counter).parent / "cgroup.procs").read_text().split()
    except OSError:
        return False


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


def autogroup(switch: str = "/proc/sys/kernel/sched_autogroup_enabled") -> bool:
    """Whether the host's scheduler gives each session one share of the CPU (Linux's autogroup, on by default):
    then a kernel (a session of its own, whose processes cannot start another) gets one share however many
    processes it runs."""
    try:
        return open(switch).read().strip() == "1"
    except OSError:
        return False

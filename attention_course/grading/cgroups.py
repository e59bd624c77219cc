"""Per-kernel cgroups: a memory and a process cap where the host delegates them.

cgroup v1 (a hierarchy per controller, ``/sys/fs/cgroup/memory/...``) and cgroup v2 (one unified
hierarchy, a subtree delegated to the grader with ``memory`` and ``pids`` enabled in its
``cgroup.subtree_control``) are both used; each controller is taken from wherever the host binds it.
Every function takes the cgroupfs root and the text of ``/proc/self/cgroup`` as arguments, so that the
v2 path can be tested against a fake cgroupfs tree on hosts that bind their controllers to v1.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids")


@dataclass
class Layout:
    """Where this process's memory and pids controllers live: ``{controller: (version, folder)}``."""

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
           self_cgroup: str | None = None) -> Cgroups:
    """Child cgroups named ``name`` with the kernel's caps, under wherever each controller is delegated."""
    made = Cgroups()
    where = layout(root, self_cgroup)
    limits = {1: {"memory": [("memory.limit_in_bytes", memory_bytes)], "pids": [("pids.max", processes)]},
              2: {"memory": [("memory.max", memory_bytes), ("memory.swap.max", 0)], "pids": [("pids.max", processes)]}}
    for controller, (version, base) in sorted(where.places.items()):
        target = base / name
        try:
            target.mkdir(exist_ok=True)
            for filename, value in limits[version][controller]:
                path = target / filename
                if version == 2 and filename == "memory.swap.max" and not path.exists():
                    continue
                path.write_text(str(value))
        except OSError:
            try:
                target.rmdir()
            except OSError:
                pass
            continue
        made.dirs.append((version, controller, target))
    return made


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

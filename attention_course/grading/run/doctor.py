"""Which layers of the sandbox hold on this host: ``python -m attention_course.grading doctor`` (``make doctor``).

The doctor does not guess from the kernel version: it starts a short-lived process in exactly the sandbox a
kernel gets (:func:`.kernel.sandbox_config`, :mod:`.sandbox`) and reports what that process finds out
about itself, and what the sandbox said it could not do. ``autograde`` runs the same probe and prints its
one-line :func:`summary` before grading, with a warning for every missing layer.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from ..course import COURSE_ID, exchange_root
from ..kernels import cgroups, kernel
from .progress import traceback_cause

#: Run inside the probe's sandbox: what a hand-in could find out about its own confinement.
PROBE = r"""
import json, os, socket, sys
found = {"uid": os.getuid(), "pid": os.getpid()}
st = os.statvfs(".")
found["scratch_bytes"] = st.f_blocks * st.f_frsize
try:
    socket.create_connection(("127.0.0.1", 22), timeout=0.5).close()
    found["loopback"] = "reached"
except OSError as exc:
    found["loopback"] = type(exc).__name__
try:
    found["others_visible"] = sum(1 for p in os.listdir("/proc") if p.isdigit()) - 1
except OSError:
    found["others_visible"] = 0
try:
    open(sys.argv[1], "rb").read(1)
    found["course_readable"] = True
except OSError:
    found["course_readable"] = False
found["course_visible"] = os.path.lexists(sys.argv[1])
seccomp = [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")]
found["seccomp"] = int(seccomp[0]) if seccomp else 0
try:
    os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) - 1)
    found["nice_lowered"] = True
except OSError:
    found["nice_lowered"] = False
print(json.dumps(found))
"""


def probe(settings: dict, course_file: str) -> dict:
    """Sandbox a short-lived process as a kernel would be, and return its report:
    ``{"facts": ..., "notes": [...], "found": ...}``."""
    scratch = kernel.scratch_folder()
    groups = cgroups.Cgroups()
    try:
        if settings.get("cgroups", True):
            groups = cgroups.create(scratch.name, settings["memory_bytes"], settings["processes"])
        uid = kernel.kernel_uid(settings.get("uid_base", 0))
        kernel.sandbox_config(scratch, settings, uid, groups)
        proc = subprocess.run([sys.executable, "-m", "attention_course.grading.kernels.sandbox", str(scratch / "sandbox-config.json"),
                               "--", sys.executable, "-I", "-c", PROBE, course_file],
                              capture_output=True, text=True, timeout=60, cwd=scratch,
                              env={"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "LANG": "C.UTF-8"})
        try:
            report = json.loads((scratch / "sandbox.json").read_text())
        except (OSError, ValueError):
            report = {"facts": {}, "notes": [f"the sandbox did not report: {proc.stderr.strip()[-500:]}"]}
        try:
            report["found"] = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            report["found"] = {}
            report["notes"].append(f"the probe did not run: {proc.stderr.strip()[-500:]}")
        report["cgroups"] = sorted({f"v{v} {c}" for v, c, _ in groups.dirs if c in cgroups.CONTROLLERS})  # caps alone
        report["cgroup_notes"] = cgroups.layout().notes if settings.get("cgroups", True) else ["turned off"]
        return report
    finally:
        groups.kill()
        shutil.rmtree(scratch, ignore_errors=True)


#: What each layer stops; where it is missing, a hand-in can do this (``make doctor`` and ``make autograde`` say it).
OPEN = {
    "user": "a hand-in runs as root: it may do whatever root may where the layers below do not stop it",
    "namespaces": "a hand-in may reach the network (network), see and signal the grader's processes and leave "
                  "processes running after grading (pid), share System V shared memory and message queues with "
                  "other kernels and leave them on the host (ipc)",
    "view": "a hand-in sees the host's files: it may change the mode, owner, times and attributes of every file its "
            "user owns (a grader that is not root: the course folder, the gradebook), connect to any Unix socket by "
            "its path (a database, tmux, an agent) and find the course's files by name",
    "scratch": "a hand-in may fill the disk, one file after another (only each file is capped)",
    "limits": "a hand-in may start processes without limit (no RLIMIT_NPROC)",
    "landlock": "a hand-in may read every file its user may (with the view: every file of the Python installation "
                "and the package) and open TCP connections where a network namespace is missing",
    "seccomp": "a hand-in may read the grader's session keyring, make namespaces of its own and use kernel "
               "interfaces no kernel needs (BPF, perf, userfaultfd, io_uring, mounts)",
    "cgroups": "memory is capped per process (RLIMIT_AS) rather than per kernel; processes by RLIMIT_NPROC only",
    "cpu": "a hand-in's processes may take every core: classmates graded beside it wait (48 busy children made theirs "
           "4 to 10 times slower)",
}
#: Layers without which ``autograde`` refuses to grade unless the instructor accepts what they leave open.
REQUIRED = ("user", "namespaces", "view", "scratch", "limits", "landlock", "seccomp")


def layers(report: dict, settings: dict) -> list[tuple[str, bool | None, str]]:
    """(layer, active (None: not applicable), what it does, or what it leaves open and the fix)."""
    facts, found = report.get("facts", {}), report.get("found", {})
    gib = lambda n: f"{n / 2**30:g} GiB" if n >= 2**30 else f"{n / 2**20:g} MiB"  # noqa: E731
    ns = facts.get("namespaces", [])
    uid = found.get("uid", facts.get("uid"))
    rows = []
    rows.append(("user", uid not in (0, None),
                 f"kernels run as uid {uid}, not root: the process cap counts their own processes"
                 if uid not in (0, None) else
                 "kernels run as root (uid 0): set c.JudgedExecute.kernel_uid_base > 0, or grade as an ordinary user"))
    want = {"mount", "network", "pid", "ipc"}
    share = facts.get("cpu", {}).get("share")
    rows.append(("namespaces", want <= set(ns),
                 f"{', '.join(ns)}: no network (loopback {found.get('loopback', '?')}), "
                 f"{found.get('others_visible', '?')} other processes visible, System V IPC of "
                 "its own, every process and shared memory segment ends with the kernel"
                 if want <= set(ns) else
                 f"only {', '.join(ns) or 'none'} (missing {', '.join(sorted(want - set(ns)))}): allow namespaces "
                 "(Debian/Ubuntu: sysctl kernel.unprivileged_userns_clone=1, "
                 "kernel.apparmor_restrict_unprivileged_userns=0; in a container: --security-opt seccomp=unconfined "
                 "or grade as root)"))
    view = bool(facts.get("view")) and not found.get("course_visible", True)
    rows.append(("view", view,
                 "a root of its own: the Python installation, the package, its scratch folder, nothing else of the "
                 "host (no course folder, /tmp, /home or /run); all of it read-only but its scratch"
                 if view else "no private view of the file system (needs a mount namespace, pivot_root and "
                 "mount_setattr, Linux >= 5.12)"))
    size = found.get("scratch_bytes", 0) if facts.get("scratch_bytes") else 0
    rows.append(("scratch", bool(facts.get("scratch_bytes")),
                 f"{gib(size)} file system of its own (tmpfs): all a kernel may write, gone when it ends"
                 if facts.get("scratch_bytes") else
                 f"writes limited per file only ({gib(settings['file_bytes'])}): needs a mount namespace"))
    nproc = facts.get("nproc", -1)
    rows.append(("limits", nproc not in (-1, None) and nproc < 10**6,
                 f"address space {gib(settings['memory_bytes'])}, {settings['processes']} processes "
                 f"(RLIMIT_NPROC {nproc}), {gib(settings['file_bytes'])} per file"
                 if nproc not in (-1, None) and nproc < 10**6 else "no process cap (RLIMIT_NPROC): kernels run as root"))
    abi = facts.get("landlock", 0)
    rows.append(("landlock", abi >= 1 and not found.get("course_readable", True),
                 f"ABI {abi}: reads Python and the course package only, writes its scratch only"
                 + ("; no TCP" if abi >= 4 else "; TCP is not restricted (ABI < 4)")
                 + ("; no signals out of the sandbox" if abi >= 6 else "; signals not scoped (ABI < 6)")
                 if abi >= 1 else "not available (Linux >= 5.13 with CONFIG_SECURITY_LANDLOCK and lsm=landlock): "
                 "kernels can read every file their user can"))
    rows.append(("seccomp", bool(facts.get("seccomp")) and bool(found.get("seccomp")),
                 "libseccomp filter: no keyrings, no namespaces, no ptrace, BPF, perf, userfaultfd, io_uring or mounts; "
                 "setsid does nothing"
                 if facts.get("seccomp") and found.get("seccomp") else
                 "no system-call filter: install libseccomp (Debian: libseccomp2) for pyseccomp"))
    groups = report.get("cgroups") or []
    cpu = facts.get("cpu", {})
    cores = f"{cpu.get('cores', cgroups.CPU_CORES):g} core"
    rows.append(("cgroups", bool(groups),
                 f"{', '.join(groups)}: memory {gib(settings['memory_bytes'])}, {settings['processes']} processes"
                 + (f", {cores} of CPU" if share == "cgroup" else "")
                 if groups else "none: " + "; ".join(report.get("cgroup_notes") or ["not delegated"])
                 + " (the other layers hold without them)"))
    holds = share == "cgroup" or share == "session" and bool(facts.get("seccomp"))  # setsid does nothing: one session
    rows.append(("cpu", holds and not found.get("nice_lowered", True), cpu_text(cpu, cores)))
    return rows


def cpu_text(cpu: dict, cores: str) -> str:
    """What holds a kernel's processes to their share of the CPU on this host (the ``cpu`` row)."""
    threads = f"torch and BLAS get {cpu.get('threads', '?')} thread{'' if cpu.get('threads') == 1 else 's'}"
    if cpu.get("share") == "cgroup":
        return (f"a cpu cgroup per kernel: its processes together get at most {cores} (a quota), with the weight of "
                f"one process, however many they are; {threads}")
    if cpu.get("share") == "session":
        return ("no cpu cgroup: each kernel is a session of its own, which its processes cannot leave (setsid does "
                "nothing), and the scheduler gives each session one share (autogroup): a kernel's processes together "
                "get one share beside any other kernel's, however many they are; not a cap (such a kernel still takes "
                f"CPU no one else wants; delegate the cpu controller for a quota); {threads}")
    return ("no cpu cgroup and the scheduler does not group sessions (kernel.sched_autogroup_enabled=0): a kernel's "
            "processes may take every core (sysctl kernel.sched_autogroup_enabled=1, or delegate the cpu controller)")


def probe_failure(report: dict) -> str | None:
    """Why the probe could not run a sandboxed process at all (every layer then reads as missing), in one line."""
    if report.get("facts"):
        return None

    notes = [n for n in report.get("notes", []) if n]
    return traceback_cause(notes[-1].split("\n")) if notes else "it reported nothing"


def summary(report: dict, settings: dict) -> tuple[str, list[str]]:
    """One line for autograde, and for every missing layer what it leaves open."""
    rows = layers(report, settings)
    active = [name for name, ok, _ in rows if ok]
    missing = [f"sandbox layer missing: {name}: {text}; open: {OPEN[name]}" for name, ok, text in rows if ok is False]
    failed = probe_failure(report)
    if failed:
        missing.insert(0, f"the sandbox probe could not run a sandboxed process ({failed}): a kernel would not "
                          "start either; the layers below cannot be told")
    facts = report.get("facts", {})
    line = (f"Sandbox: {', '.join(active) or 'no layer'} active (kernel uid {facts.get('uid', '?')}, namespaces "
            f"{'+'.join(facts.get('namespaces', [])) or 'none'}, Landlock ABI {facts.get('landlock', 0)}, "
            f"cgroups {', '.join(report.get('cgroups') or []) or 'none'}); `make doctor` explains")
    return line, missing


def refused(report: dict, settings: dict, accepted: set[str]) -> list[str]:
    """The required layers (:data:`REQUIRED`) missing on this host that the instructor has not accepted."""
    return [name for name, ok, _ in layers(report, settings) if ok is False and name in REQUIRED and name not in accepted]


def exchange_findings(root: str, course_id: str, homes: str = "/home",
                      links: str = "/proc/sys/fs/protected_hardlinks") -> list[tuple[str, bool | None, str]]:
    """What students can do to each other through the exchange and their homes: (what, holds?, why) rows for the
    exchange root, the course's folder in it, its ``inbound/``, hard links to others' files (``links``: the kernel's
    setting) and the homes under ``homes``."""
    rows = []
    try:
        mode = stat.S_IMODE(os.stat(root).st_mode)
    except OSError:
        return [("exchange", None, f"{root} does not exist yet (the first release makes it)")]
    if not mode & 0o002:
        rows.append(("exchange", False, f"{root} is {mode:04o}: students' nbgrader commands refuse an exchange "
                                        "they cannot write (make it 1777)"))
    else:
        rows.append(("exchange", bool(mode & stat.S_ISVTX), f"{root} is {mode:04o}" + (
            " (sticky: nobody renames another's folder)" if mode & stat.S_ISVTX else
            ": not sticky, any user can rename the course folder away (release once: the course makes it 1777)")))
    course = os.path.join(root, course_id)
    try:
        info = os.stat(course)
    except OSError:
        rows.append(("course", False, f"{course} is not made yet: any user can make it first and stop your releases "
                                      "(release an assignment now)"))
    else:
        mine = info.st_uid == os.geteuid()
        rows.append(("course", mine, f"{course} is owned by uid {info.st_uid}" + (
            " (you)" if mine else ": not you; a squatter's? remove it as root, then release")))
        try:
            inbound = stat.S_IMODE(os.stat(os.path.join(course, "inbound")).st_mode)
        except OSError:
            rows.append(("inbound", None, "no inbound/ yet (the first release makes it)"))
        else:
            holds = bool(inbound & stat.S_ISVTX) and not inbound & 0o004
            rows.append(("inbound", holds, f"inbound/ is {inbound:04o}" + (
                " (sticky, not listable by students)" if holds else
                ": students can list it or rename each other's hand-ins (release again: the course makes it sticky)")))
    try:
        protected = open(links).read().strip() == "1"
    except OSError:
        protected = None
    rows.append(("hardlinks", protected, "fs.protected_hardlinks is 1: nobody hard-links a file they do not own" if
                 protected else "fs.protected_hardlinks is not 1: a student can hard-link a classmate's handed-in file "
                 "into her folder, which moves its change time and makes the classmate's hand-in late (sysctl "
                 "fs.protected_hardlinks=1)" if protected is False else f"{links} cannot be read"))
    try:
        open_homes = sorted(h for h in os.listdir(homes)
                            if os.path.isdir(os.path.join(homes, h)) and os.stat(os.path.join(homes, h)).st_mode & 0o005)
    except OSError:
        open_homes = []
    rows.append(("homes", not open_homes, f"{len(open_homes)} home(s) in {homes} others can enter or list"
                 + (f" ({', '.join(open_homes[:5])}{', ...' if len(open_homes) > 5 else ''}): a student can read a "
                    "classmate's nbgrader cache and fetched feedback there; chmod 0700 (or 0750) them"
                    if open_homes else "")))
    return rows


def main(settings: dict, course_file: str) -> int:
    report = probe(settings, course_file)
    print("Sandbox layers on this host: what every kernel that runs a hand-in gets (a real probe, not a guess)\n")
    rows = layers(report, settings)
    if probe_failure(report):
        print(f"  The probe could not run a sandboxed process: {probe_failure(report)}\n")
    for name, ok, text in rows:
        mark = "ok" if ok else "--" if ok is None else "MISSING"
        print(f"  [{mark:^7}] {name:<10} {text}")
    gaps = [name for name, ok, _ in rows if ok is False]
    if gaps:
        print("\nWhat a hand-in can do on this host because of that:")
        for name in gaps:
            print(f"  - {name}: {OPEN[name]}")
        required = [name for name in gaps if name in REQUIRED]
        if required:
            print(f"\n`make autograde` refuses to grade here until you accept it: "
                  f"make autograde ACCEPT={','.join(required)}")
    notes = [n for n in report.get("notes", []) if n]
    if notes:
        print("\nWhat the sandbox reported it could not do:")
        for note in notes:
            print(f"  - {note}")

    course = Path(os.path.abspath(course_file)).parent
    root = exchange_root(course)
    print("\nThe exchange and the homes: what students can do to each other's work")
    findings = exchange_findings(root, COURSE_ID)
    if Path(root).resolve() == (course / "exchange").resolve():  # out of the box: one user, nobody to fear
        findings = [("exchange", None, f"{root} is the course's own (one machine, one user); on a hub set "
                                       "Exchange.root for everybody (docs/jupyterhub.md)"), findings[-1]]
    for name, ok, text in findings:
        print(f"  [{'holds' if ok else 'n/a' if ok is None else 'OPEN':^7}] {name:<10} {text}")
    print(f"\nGrader: uid {os.geteuid()}{' (root)' if os.geteuid() == 0 else ''}, Python {sys.version.split()[0]}, "
          f"Linux {os.uname().release}")
    return 0

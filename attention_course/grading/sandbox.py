"""Start a student's kernel in a sandbox: ``python -m attention_course.grading.sandbox CONFIG -- CMD...``.

CONFIG is a JSON file written by the grader. In this order the launcher
1. joins the grader's cgroups for this kernel (process and memory caps), where there are any;
2. sets resource limits: address space, file size, open files, core dumps, and (for a
   non-root grader) the number of processes;
3. moves into network and mount namespaces of its own (no network at all, not even loopback:
   no TCP, no UDP), where it can make them, and hides ``/run`` and ``/var/run`` there behind
   empty file systems (Unix sockets of local services live there);
4. forbids gaining privileges (``no_new_privs``) and, for a root grader, drops every capability;
5. applies a Landlock policy: read-only access to the Python installation, the course package
   and, of ``/proc``, its own entry and a few machine-wide files (never other processes'), read-write
   access to the kernel's scratch folder only, no TCP at all, no signals to processes outside the
   sandbox and no access to their memory;
6. replaces itself with the kernel.

Every step reports what it could not do in ``<scratch>/sandbox.json``; the grader logs it.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys

_libc = ctypes.CDLL(None, use_errno=True)

# x86_64 and aarch64 share these syscall numbers (the generic table from 5.13 on).
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x10000000, 0x40000000
#: What a confined process may read of /proc besides its own entry: machine-wide facts libraries ask for.
_PROC_FILES = ("cpuinfo", "meminfo", "stat", "loadavg", "filesystems", "sys/kernel", "sys/vm")
_MS_REC, _MS_PRIVATE = 0x4000, 0x40000

_FS_V1 = (1 << 13) - 1  # execute ... make_sym
_FS_BITS = {1: _FS_V1, 2: _FS_V1 | 1 << 13, 3: _FS_V1 | 3 << 13, 4: _FS_V1 | 3 << 13, 5: _FS_V1 | 7 << 13}
_READ = 1 << 0 | 1 << 2 | 1 << 3  # execute, read_file, read_dir
_NET_TCP = 1 << 0 | 1 << 1  # bind, connect
_SCOPE = 1 << 0 | 1 << 1  # abstract unix sockets, signals


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def landlock_abi() -> int:
    """The Landlock ABI version of this kernel (0 where there is none)."""
    version = _libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def _landlock(read: list[str], write: list[str]) -> list[str]:
    abi = landlock_abi()
    if abi < 1:
        return ["Landlock is not available: the kernel can read and write every file the grader can"]
    fs = _FS_BITS.get(abi, _FS_BITS[5])
    attr = (ctypes.c_uint64 * 3)(fs, _NET_TCP if abi >= 4 else 0, _SCOPE if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return [f"Landlock ruleset failed: {os.strerror(ctypes.get_errno())}"]
    notes = []
    for paths, access in ((read, _READ), (write, fs)):
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            allowed = access if os.path.isdir(path) else access & (1 << 0 | 1 << 1 | 1 << 2 | 1 << 14 | 1 << 15)
            rule = _PathBeneath(allowed & fs, fd)
            if _libc.syscall(_SYS_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0) < 0:
                notes.append(f"Landlock rule for {path} failed: {os.strerror(ctypes.get_errno())}")
            os.close(fd)
    if _libc.syscall(_SYS_RESTRICT, ruleset, 0) < 0:
        return notes + [f"Landlock restrict failed: {os.strerror(ctypes.get_errno())}"]
    os.close(ruleset)
    if abi < 4:
        notes.append("Landlock ABI < 4: TCP is not restricted")
    if abi < 6:
        notes.append("Landlock ABI < 6: signals to other processes are not restricted")
    return notes


def _proc_paths(read: list[str]) -> list[str]:
    """``/proc`` in a read list narrowed to this process's own entry and a few machine-wide files."""
    if "/proc" not in read:
        return read
    own = [f"/proc/{os.getpid()}"] + [f"/proc/{name}" for name in _PROC_FILES]
    return [p for p in read if p != "/proc"] + own


def _namespaces() -> list[str]:
    """Network and mount namespaces of our own: no network; /run and /var/run emptied (local services'
    Unix sockets live there)."""
    flags = _CLONE_NEWNS | _CLONE_NEWNET if os.geteuid() == 0 else _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWUSER
    uid, gid = os.getuid(), os.getgid()
    notes = []
    if _libc.unshare(flags) != 0:
        notes.append(f"no network namespace ({os.strerror(ctypes.get_errno())}): the kernel keeps the machine's "
                     "network (UDP, loopback)")
        flags &= ~_CLONE_NEWNET
        if _libc.unshare(flags) != 0:
            return notes + [f"no mount namespace ({os.strerror(ctypes.get_errno())}): /run stays visible"]
    if flags & _CLONE_NEWUSER:
        try:
            with open("/proc/self/setgroups", "w") as f:
                f.write("deny")
            with open("/proc/self/uid_map", "w") as f:
                f.write(f"{uid} {uid} 1")
            with open("/proc/self/gid_map", "w") as f:
                f.write(f"{gid} {gid} 1")
        except OSError as exc:
            return notes + [f"user namespace mapping failed ({exc})"]
    _libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
    for path in ("/run", "/var/run"):
        real = os.path.realpath(path)
        if os.path.isdir(real) and real == path:
            if _libc.mount(b"tmpfs", real.encode(), b"tmpfs", 0, b"size=1m,mode=755") != 0:
                notes.append(f"could not hide {real}: {os.strerror(ctypes.get_errno())}")
    return notes


def _drop_capabilities() -> list[str]:
    if os.geteuid() != 0:
        return []
    for cap in range(64):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        return [f"could not drop capabilities: {os.strerror(ctypes.get_errno())}"]
    return []


def apply(config: dict) -> list[str]:
    """Confine the current process as ``config`` says; returns notes on what could not be done."""
    notes = []
    for procs in config.get("cgroups", []):
        try:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            notes.append(f"could not join cgroup {procs}: {exc}")
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, 4096),
              (resource.RLIMIT_FSIZE, int(config.get("file_bytes", 256 * 2**20)))]
    if config.get("memory_bytes"):
        limits.append((resource.RLIMIT_AS, int(config["memory_bytes"])))
    if os.geteuid() != 0 and config.get("processes"):
        running = sum(1 for p in os.listdir("/proc") if p.isdigit())  # an upper bound for this user
        limits.append((resource.RLIMIT_NPROC, running + int(config["processes"])))
    for which, value in limits:
        try:
            soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError) as exc:
            notes.append(f"rlimit {which}: {exc}")
    if config.get("hide_run", True):
        notes += _namespaces()
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        notes.append("no_new_privs failed")
    notes += _drop_capabilities()
    notes += _landlock(_proc_paths(config.get("read", [])), config.get("write", []))
    return notes


def confine(config_path: str) -> None:
    """Confine this process as the JSON file ``config_path`` says; write what could not be done to its report."""
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    notes = apply(config)
    report = config.get("report")
    if report:
        try:
            with open(report, "w", encoding="utf-8") as f:
                json.dump(notes, f)
        except OSError:
            pass


def main(argv: list[str]) -> None:
    if "--" not in argv or len(argv) < 3:
        sys.exit("usage: python -m attention_course.grading.sandbox CONFIG -- CMD...")
    confine(argv[0])
    cmd = argv[argv.index("--") + 1:]
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])

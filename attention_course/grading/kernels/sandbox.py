"""Start a student's kernel in a sandbox: ``python -m attention_course.grading.kernels.sandbox CONFIG -- CMD...``.

CONFIG is a JSON file written by the grader. The layers, in the order they are put on; none of the first
six depends on cgroups, and each reports in ``<scratch>/sandbox.json`` what it could not do:

1. cgroups (:mod:`.cgroups`, v1 or v2, where the host delegates them): a memory and a process cap, and a share
   of the CPU (at most one core; without a cpu cgroup, its session's share where the host groups sessions);
2. resource limits: address space and data size, file size, open files, no core dumps, no lower nice value;
3. namespaces of its own: network (no network at all, not even loopback), mount (``/run`` hidden, paths
   the kernel needs made reachable, a size-limited scratch file system), PID (the kernel is process 1 of
   its namespace: when it ends, every process the hand-in started ends with it), and, for a grader that
   is not root, a user namespace that makes the others possible;
4. an unprivileged user: a root grader's kernel runs as a uid of its own (never 0), so that the process
   cap (``RLIMIT_NPROC``) counts its processes and it cannot signal anyone else's;
5. ``no_new_privs`` and no capabilities;
6. Landlock: read-only access to the Python installation, the course package, the hand-in's files and,
   of ``/proc``, its own entry and a few machine-wide files; write access to its scratch file system only;
   no TCP; no signals to processes outside the sandbox;
7. the kernel itself (``exec`` of CMD, or the fork server's kernel).

The process that applies the sandbox stays outside the new PID namespace as the kernel's supervisor: it
waits for the kernel and exits with its status; if the grader kills it, the kernel and everything it
started die too (a parent-death signal, then the end of the namespace).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import stat
import sys

from . import cgroups, rootfs

_libc = ctypes.CDLL(None, use_errno=True)

# x86_64 and aarch64 share these syscall numbers (the generic table from 5.13 on).
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_PR_SET_PDEATHSIG, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_GET_NO_NEW_PRIVS = 1, 24, 38, 39
_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x20000000, 0x10000000, 0x40000000
_CLONE_NEWIPC = 0x08000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 8, 4096, 0x4000, 0x40000
#: What a confined process may read of /proc besides its own entry: machine-wide facts libraries ask for.
_PROC_FILES = ("cpuinfo", "meminfo", "stat", "loadavg", "filesystems", "sys/kernel", "sys/vm")

_FS_V1 = (1 << 13) - 1  # execute ... make_sym
_FS_BITS = {1: _FS_V1, 2: _FS_V1 | 1 << 13, 3: _FS_V1 | 3 << 13, 4: _FS_V1 | 3 << 13, 5: _FS_V1 | 7 << 13}
_READ = 1 << 0 | 1 << 2 | 1 << 3  # execute, read_file, read_dir
_SOCKETS = 1 << 3 | 1 << 5 | 1 << 9  # read_dir, remove_file, make_sock: ZeroMQ's ipc sockets, nothing else
_FILE_RIGHTS = 1 << 0 | 1 << 1 | 1 << 2 | 1 << 14 | 1 << 15  # what a rule on a single file may grant
_NET_TCP = 1 << 0 | 1 << 1  # bind, connect
_SCOPE = 1 << 0 | 1 << 1  # abstract unix sockets, signals
NAMES = {_CLONE_NEWUSER: "user", _CLONE_NEWNS: "mount", _CLONE_NEWNET: "network", _CLONE_NEWPID: "pid",
         _CLONE_NEWIPC: "ipc"}


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _err() -> str:
    return os.strerror(ctypes.get_errno())


def landlock_abi() -> int:
    """The Landlock ABI version of this kernel (0 where there is none)."""
    version = _libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def _landlock(read: list[str], write: list[str], sockets: list[str]) -> list[str]:
    abi = landlock_abi()
    if abi < 1:
        return ["Landlock is not available: the kernel can read and write every file its user can"]
    fs = _FS_BITS.get(abi, _FS_BITS[5])
    attr = (ctypes.c_uint64 * 3)(fs, _NET_TCP if abi >= 4 else 0, _SCOPE if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return [f"Landlock ruleset failed: {_err()}"]
    notes = []
    for paths, access in ((read, _READ), (write, fs), (sockets, _SOCKETS)):
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            allowed = access if stat.S_ISDIR(os.fstat(fd).st_mode) else access & _FILE_RIGHTS
            rule = _PathBeneath(allowed & fs, fd)
            if _libc.syscall(_SYS_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0) < 0:
                notes.append(f"Landlock rule for {path} failed: {_err()}")
            os.close(fd)
    if _libc.syscall(_SYS_RESTRICT, ruleset, 0) < 0:
        return notes + [f"Landlock restrict failed: {_err()}"]
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


# -- namespaces and mounts --------------------------------------------------------------------
def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> bool:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    return _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) == 0


def _unshare(want_pid: bool) -> tuple[int, list[str]]:
    """New namespaces for this process (the PID one for its next child); returns the flags obtained."""
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    full = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | (_CLONE_NEWPID if want_pid else 0) | \
        (0 if root else _CLONE_NEWUSER)
    notes = []
    for flags in (full, full & ~_CLONE_NEWNET, full & ~_CLONE_NEWNET & ~_CLONE_NEWPID,
                  full & ~_CLONE_NEWNET & ~_CLONE_NEWPID & ~_CLONE_NEWIPC):
        if _libc.unshare(flags) == 0:
            break
        notes.append(f"unshare({'+'.join(n for f, n in NAMES.items() if flags & f)}) failed: {_err()}")
    else:
        return 0, notes + ["no namespaces: the kernel shares the machine's network, mounts and processes"]
    if flags & _CLONE_NEWUSER:
        try:
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        except OSError as exc:
            return flags, notes + [f"user namespace mapping failed ({exc})"]
    missing = [n for f, n in NAMES.items() if full & f and not flags & f]
    if missing:
        notes.append(f"no {' or '.join(missing)} namespace")
    return flags, notes


def _hide_run() -> list[str]:
    notes = []
    for path in ("/run", "/var/run"):
        real = os.path.realpath(path)
        if os.path.isdir(real) and real == path and not _mount("tmpfs", real, "tmpfs", _MS_NOSUID | _MS_NODEV,
                                                                "size=1m,mode=755"):
            notes.append(f"could not hide {real}: {_err()}")
    return notes


def _scratch_fs(spec: dict, uid: int, gid: int, mounted: bool) -> tuple[int, list[str]]:
    """The kernel's writable folders, on a file system of ``spec['bytes']`` where mounts are possible."""
    path, size = spec["path"], int(spec["bytes"])
    notes, got = [], 0
    if mounted:
        if _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={size},mode=700,uid={uid},gid={gid}"):
            got = size
        else:
            notes.append(f"no size-limited scratch file system ({_err()}): writes are limited per file only")
    else:
        notes.append("no mount namespace: no size-limited scratch file system, writes are limited per file only")
    for sub in spec.get("dirs", []):
        folder = os.path.join(path, sub)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(folder, uid, gid)
    return got, notes


#: System calls a kernel never needs and that reach past its walls or into the host's kernel: keyrings (the
#: grader's session keyring is inherited), other processes' memory, mounts and namespaces, kernel modules and BPF.
DENIED_SYSCALLS = ("keyctl", "add_key", "request_key", "ptrace", "process_vm_readv", "process_vm_writev",
                   "pidfd_getfd", "kcmp", "perf_event_open", "bpf", "userfaultfd", "io_uring_setup", "mount",
                   "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig",
                   "fspick", "mount_setattr", "unshare", "setns", "open_by_handle_at", "name_to_handle_at",
                   "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "swapon",
                   "swapoff", "reboot", "acct", "quotactl", "syslog", "vhangup", "lookup_dcookie",
                   "sched_setattr")  # with sched_setscheduler to any policy but the ordinary one: see _filter_syscalls


def libseccomp():
    """pyseccomp (libseccomp's API over ctypes), loaded before any confinement (it looks for the library with
    ``ldconfig``); the exception instead where this host has no libseccomp."""
    try:
        import pyseccomp

        return pyseccomp
    except Exception as exc:  # noqa: BLE001  (an OSError or a missing module: reported as the missing layer)
        return exc


def _filter_syscalls(seccomp) -> list[str]:
    """A seccomp filter (libseccomp, through pyseccomp): :data:`DENIED_SYSCALLS` fail with EPERM; ``clone`` may not
    make namespaces, and ``clone3`` (whose flags a filter cannot read) says ENOSYS, so that the C library falls
    back to ``clone``; ``setsid`` returns 0 and does nothing (a process stays in its kernel's session, process group
    and scheduler group); ``sched_setscheduler`` only to the ordinary policy. Everything else is allowed: the other layers decide what a call may reach."""
    if isinstance(seccomp, Exception):
        return [f"no system-call filter (libseccomp): {type(seccomp).__name__}: {seccomp}"]
    try:
        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        for name in DENIED_SYSCALLS:
            try:
                rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
            except (RuntimeError, ValueError, OSError):  # not a system call of this machine
                pass
        for flag in (_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET, _CLONE_NEWIPC, 0x04000000,
                     0x02000000, 0x00000080):  # ... UTS, cgroup, time
            rules.add_rule(seccomp.ERRNO(errno.EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        rules.add_rule(seccomp.ERRNO(0), "setsid")
        # a kernel keeps the ordinary scheduling policy (ZeroMQ's threads set it, unchanged): a batch or idle policy
        # switched on and off between the readings of the limits' clock would make its own waits for a CPU look like
        # the machine's (kernels.clock; a nice value it raises it cannot lower again, and the clock sees it)
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "sched_setscheduler", seccomp.Arg(1, seccomp.NE, 0))
        rules.load()
    except Exception as exc:  # no libseccomp on this host, or the filter was refused
        return [f"no system-call filter: {type(exc).__name__}: {exc}"]
    return []


def _supervise(child: int) -> None:
    """The process outside the kernel's PID namespace: wait for the kernel, exit with its status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are for the kernel
    os.closerange(3, 4096)
    try:
        status = os.waitpid(child, 0)[1]  # (retried on EINTR)
    except ChildProcessError:
        status = 0
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def parent_death_signal() -> None:
    """Have the system kill this process when its parent (the thread that forked it) ends (Linux)."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _drop_bounding_set() -> None:
    for cap in range(64):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)


def _drop_capabilities() -> list[str]:
    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    if _libc.capset(ctypes.byref(header), data) != 0:
        return [f"could not drop capabilities: {_err()}"]
    return []


def _switch_user(uid: int, gid: int) -> list[str]:
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        return [f"could not become uid {uid}: {exc}: the kernel keeps its grader's user"]
    parent_death_signal()  # a change of user clears it
    return []


def _set_limits(pairs: list[tuple[int, int]]) -> list[str]:
    notes = []
    for which, value in pairs:
        try:
            soft, hard = resource.getrlimit(which)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError) as exc:
            notes.append(f"rlimit {which}: {exc}")
    return notes


def apply(config: dict) -> tuple[list[str], dict]:
    """Confine this process as ``config`` says. Where a PID namespace is made, this process becomes the
    supervisor (it never returns) and its child, process 1 of the namespace, returns. Returns notes on what
    could not be done, and the facts of the sandbox obtained (uid, namespaces, caps...)."""
    seccomp = libseccomp() if config.get("seccomp", True) else None
    notes = cgroups.join(config.get("cgroups", []))
    capped = cgroups.cpu_cap(config.get("cgroups", []))  # the kernel's CPU share: its cgroup's quota, or its session's
    threads = cgroups.use_threads(capped or cgroups.CPU_CORES)
    limits = [(resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, 4096), (resource.RLIMIT_NICE, 0),
              (resource.RLIMIT_FSIZE, int(config.get("file_bytes", 64 * 2**20)))]
    if config.get("memory_bytes"):
        limits += [(resource.RLIMIT_AS, int(config["memory_bytes"])), (resource.RLIMIT_DATA, int(config["memory_bytes"]))]
    notes += _set_limits(limits)
    root = os.geteuid() == 0
    uid = config.get("uid") if root and config.get("uid") else os.getuid()
    gid = config.get("gid") if root and config.get("gid") else os.getgid()
    flags = 0
    if config.get("namespaces", True):
        flags, more = _unshare(want_pid=True)
        notes += more
    mounted = bool(flags & _CLONE_NEWNS)
    viewed = False
    if mounted:
        _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
        more = rootfs.enter(config["view"]) if config.get("view") else ["no private view of the file system asked for"]
        viewed = not any(n.startswith("no private view") for n in more)
        notes += more if viewed else more + _hide_run()
    scratch_bytes = 0
    if config.get("scratch_fs"):
        scratch_bytes, more = _scratch_fs(config["scratch_fs"], uid, gid, mounted)
        notes += more
    if viewed:
        notes += rootfs.seal(os.path.join(config["scratch_fs"]["path"], "shm") if config.get("scratch_fs") else "/")
    if config.get("cwd"):
        os.chdir(config["cwd"])
    if flags & _CLONE_NEWPID:
        child = os.fork()
        if child:
            _supervise(child)
        parent_death_signal()
        if not _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC):
            notes.append(f"could not mount the PID namespace's /proc: {_err()}")
    processes = int(config.get("processes") or 0)
    if processes:
        if uid != os.getuid() or flags & _CLONE_NEWUSER:  # a uid of its own, or counted in its own user namespace
            notes += _set_limits([(resource.RLIMIT_NPROC, processes)])
        elif not root:
            running = sum(1 for p in os.listdir("/proc") if p.isdigit())  # an upper bound for this user
            notes += _set_limits([(resource.RLIMIT_NPROC, running + processes)])
        else:
            notes.append("the kernel runs as root: no process cap from RLIMIT_NPROC")
    if root or flags & _CLONE_NEWUSER:
        _drop_bounding_set()
    if root and uid != 0:
        notes += _switch_user(uid, gid)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        notes.append("no_new_privs failed")
    if os.geteuid() == 0 or flags & _CLONE_NEWUSER:
        notes += _drop_capabilities()
    abi = landlock_abi()
    write = config.get("write", []) + (["/dev/shm"] if viewed else [])  # the view's /dev/shm is the kernel's own
    more = _landlock(_proc_paths(config.get("read", [])), write, config.get("sockets", []))
    notes += more
    filtered = _filter_syscalls(seccomp) if seccomp is not None else ["no system-call filter asked for"]
    notes += filtered
    facts = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
             "namespaces": [n for f, n in NAMES.items() if flags & f], "pid": os.getpid(), "view": viewed, "seccomp": not filtered,
             "scratch_bytes": scratch_bytes, "landlock": 0 if any("Landlock is" in n or "failed" in n for n in more) else abi,
             "cgroups": len(config.get("cgroups", [])), "no_new_privs": _libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1,
             "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0], "address_space": resource.getrlimit(resource.RLIMIT_AS)[0],
             "cpu": {"share": "cgroup" if capped else "session" if cgroups.autogroup() else "none", "threads": threads,
                     "cores": capped or cgroups.CPU_CORES, "nice_limit": resource.getrlimit(resource.RLIMIT_NICE)[0]}}
    return notes, facts


def confine(config_path: str) -> None:
    """Confine this process as the JSON file ``config_path`` says; write what could not be done to its report.

    The report is opened first, while its folder can still be written."""
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    report = None
    if config.get("report"):
        try:
            report = os.open(config["report"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        except OSError:
            report = None
    notes, facts = apply(config)
    if report is not None:
        try:
            os.write(report, json.dumps({"notes": notes, "facts": facts}).encode())
        except OSError:
            pass
        os.close(report)


def main(argv: list[str]) -> None:
    if "--" not in argv or len(argv) < 3:
        sys.exit("usage: python -m attention_course.grading.kernels.sandbox CONFIG -- CMD...")
    confine(argv[0])
    cmd = argv[argv.index("--") + 1:]
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])

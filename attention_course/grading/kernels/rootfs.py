"""The kernel's view of the file system: a root of its own that holds only what a kernel may use.

In the kernel's mount namespace (:mod:`.sandbox`) an empty root (a small tmpfs, on a mount point in the kernel's
scratch folder) is filled and entered with ``pivot_root``; the host's tree is then detached. The view holds:

* each path of the kernel's read list (the Python installation, the course package, system libraries, a few
  files of ``/etc``, ``/proc`` and ``/sys``), bound at the same path, read-only (a symbolic link on the way is
  made again as the same link);
* the devices ``/dev/null``, ``/dev/zero``, ``/dev/random`` and ``/dev/urandom``;
* the kernel's scratch folder, read-only (its connection file, the hand-in's files, its judge's socket), with its
  ``ipc/`` folder writable (the kernel makes its sockets there); the size-limited ``rw/`` file system and
  ``/dev/shm`` (a folder of it) are mounted by the sandbox once the view is entered.

Nothing else exists in it: no course folder, gradebook, exchange or other hand-in, no ``/tmp``, ``/home`` or
``/run`` with other users' sockets (a Unix socket is reached by its path, and none of theirs has one here). Every
mount but the scratch's writable parts is read-only, so no file outside them can have its mode, owner, times or
extended attributes changed, even one the kernel's user owns on the host.
"""

from __future__ import annotations

import ctypes
import os
import stat

_libc = ctypes.CDLL(None, use_errno=True)

_MS_BIND, _MS_REC, _MS_NOSUID, _MS_NODEV = 4096, 0x4000, 2, 4
_MNT_DETACH = 2
# mount_setattr(2): the generic syscall number (x86_64 and aarch64 alike), its flags and attributes.
_SYS_MOUNT_SETATTR, _SYS_PIVOT_ROOT = 442, {"x86_64": 155, "aarch64": 41}
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_RDONLY, _NOSUID, _NODEV, _NOEXEC = 0x1, 0x2, 0x4, 0x8
#: Devices a kernel may open (a bind of each); the rest of /dev does not exist in the view.
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def _err() -> str:
    return os.strerror(ctypes.get_errno())


def _bind(source: str, target: str, recursive: bool = True) -> bool:
    return _libc.mount(source.encode(), target.encode(), None,
                       ctypes.c_ulong(_MS_BIND | (_MS_REC if recursive else 0)), None) == 0


def restrict(path: str, attrs: int, recursive: bool = True) -> bool:
    """Add mount attributes (read-only, nosuid, ...) to the mount at ``path`` (and every mount below it)."""
    attr = _MountAttr(attrs, 0, 0, 0)
    return _libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), _AT_RECURSIVE if recursive else 0,
                         ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) == 0


def _inside(path: str, folders: list[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _place(target: str, is_dir: bool) -> None:
    """Make ``target`` exist (a folder, or an empty file to bind a file on) in the new root."""
    if is_dir:
        os.makedirs(target, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if not os.path.lexists(target):
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))


def _links(new: str, path: str, bound: list[str]) -> None:
    """Make again, in the new root, each symbolic link on the way to ``path`` (``/lib`` -> ``usr/lib``, say)."""
    cur = ""
    for part in path.strip("/").split("/"):
        cur = f"{cur}/{part}"
        if _inside(cur, bound):
            return  # below a bound folder, the bind shows the host's own links
        try:
            st = os.lstat(cur)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            link = new + cur
            if not os.path.lexists(link):
                os.makedirs(os.path.dirname(link), mode=0o755, exist_ok=True)
                os.symlink(os.readlink(cur), link)
            cur = os.path.realpath(cur)


def enter(spec: dict) -> list[str]:
    """Build the view ``spec`` describes and make it this process's root (see the module); returns what could not
    be done. ``spec``: ``root`` (an empty folder to mount the new root on), ``read`` (paths bound read-only),
    ``scratch`` (bound read-only), ``writable`` (folders of the scratch bound writable). Nothing of the host's
    tree stays reachable once it returns without a note starting with "no private view"."""
    new = spec["root"]
    if _libc.mount(b"tmpfs", new.encode(), b"tmpfs", ctypes.c_ulong(_MS_NOSUID | _MS_NODEV), b"size=1m,mode=755") != 0:
        return [f"no private view of the file system: could not mount its root ({_err()})"]
    notes, bound = [], []
    originals = [p for p in [*spec.get("read", []), *DEVICES] if os.path.lexists(p)]
    for real in sorted({os.path.realpath(p) for p in originals}):
        if _inside(real, bound) or not os.path.exists(real):
            continue
        is_dir = os.path.isdir(real)
        is_dev = real in DEVICES
        _place(new + real, is_dir)
        # /proc stays as it is: the PID namespace's own /proc is mounted over it (that mount needs a full one here)
        attrs = 0 if real == "/proc" else _RDONLY | _NOSUID | (0 if is_dev else _NODEV | (_NOEXEC if real == "/sys" else 0))
        if not _bind(real, new + real):
            notes.append(f"could not show {real} to the kernel: {_err()}")
            continue
        bound.append(real)
        if attrs and not restrict(new + real, attrs):
            notes.append(f"could not make {real} read-only: {_err()}")
    for original in originals:
        _links(new, original, bound)
    scratch = spec["scratch"]
    _place(new + scratch, True)
    if not _bind(scratch, new + scratch, recursive=False) or not restrict(new + scratch, _RDONLY | _NOSUID | _NODEV,
                                                                           recursive=False):
        notes.append(f"could not show the scratch folder read-only: {_err()}")
    for folder in spec.get("writable", []):
        if not _bind(folder, new + folder, recursive=False) or not restrict(new + folder, _NOSUID | _NODEV, False):
            notes.append(f"could not show {folder} writable: {_err()}")
    _place(new + "/dev/shm", True)
    pivot = _SYS_PIVOT_ROOT.get(os.uname().machine)
    os.chdir(new)
    if pivot is None or _libc.syscall(pivot, b".", b".") != 0:
        os.chdir("/")
        return notes + [f"no private view of the file system: pivot_root failed ({_err() if pivot else 'unknown machine'})"]
    if _libc.umount2(b".", _MNT_DETACH) != 0:  # the host's tree, stacked under the new root by pivot_root(".", ".")
        return notes + [f"no private view of the file system: the host's tree could not be detached ({_err()})"]
    os.chdir("/")
    return notes


def seal(shm: str) -> list[str]:
    """Once the scratch file system is mounted (after :func:`enter`): bind its folder ``shm`` as ``/dev/shm`` (POSIX
    shared memory of this kernel only, counted in its scratch size), then make the new root's own folders
    read-only."""
    notes = [] if _bind(shm, "/dev/shm", recursive=False) else [f"no private /dev/shm: {_err()}"]
    if not restrict("/", _RDONLY | _NOSUID | _NODEV, recursive=False):
        notes.append(f"could not make the view's root read-only: {_err()}")
    return notes

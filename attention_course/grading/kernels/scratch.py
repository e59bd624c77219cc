"""Folders the grader makes in the temporary folder (a kernel's scratch, a fork server's home) that do not
outlive their maker. A process killed before it could remove its folder (a server the hub stopped, a grader
killed mid-run) leaves it behind; each folder names its maker (:data:`MAKER`: pid and start time), and the first
folder a process makes in a temporary folder removes those of the same user whose maker is no longer running.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

#: The folders swept: a kernel's scratch (:func:`.kernel.scratch_folder`), a fork server's home (:mod:`.forkserver`).
PREFIXES = ("attention-judge-", "attention-zygote-")
#: In each folder: "<pid> <start time>" of the process that made it.
MAKER = "maker"
_SWEPT: set[str] = set()


def _started(pid: int) -> str | None:
    """When process ``pid`` started (psutil's creation time), or None if there is no such process."""
    import psutil

    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except (psutil.Error, OSError):
        return None


def remove(folder: str | os.PathLike) -> None:
    """Remove ``folder`` and all it holds, folders inside it that a kernel left closed or read-only included; a
    ``folder`` already gone is no error. Nothing outside ``folder`` is ever changed: only ``folder`` and the folders
    below it are opened up again (the temporary folder it sits in keeps its mode, 1777, whatever fails: every user of
    the machine writes there). Raises OSError for what cannot be removed."""
    top = os.path.abspath(folder)

    def inside(path: str) -> bool:
        return path == top or path.startswith(top + os.sep)

    def opened(path: str, error: BaseException) -> None:  # a real folder of ours, made readable and writable
        if not inside(path) or not stat.S_ISDIR(os.lstat(path).st_mode):  # (a link in a folder's place: not followed)
            raise error
        os.chmod(path, 0o700)

    def unlock(func, path, exc_info) -> None:
        path = os.path.abspath(path)
        if path == top and isinstance(exc_info[1], FileNotFoundError):
            return  # gone already (closed twice, or swept)
        if func in (os.open, os.scandir, os.listdir):  # a folder that cannot be read: open it, remove it whole
            opened(path, exc_info[1])
            if path == top:
                raise exc_info[1]  # (shutil.rmtree gives up on its top; the caller's next try finds it open)
            shutil.rmtree(path, onerror=unlock)
            return
        opened(os.path.dirname(path), exc_info[1])  # its folder is read-only: the entry cannot go
        func(path)

    try:
        shutil.rmtree(top, onerror=unlock)
    except OSError:
        if not os.path.lexists(top):
            return
        shutil.rmtree(top, onerror=unlock)  # once more, now that the top folder is open


def make(prefix: str, base: str | None = None) -> Path:
    """A fresh folder ``<base>/<prefix>XXXXXXXX`` (``base``: the temporary folder) that names its maker; the first in
    a process sweeps ``base`` (:func:`sweep_stale`)."""
    base = base or tempfile.gettempdir()
    if base not in _SWEPT:
        _SWEPT.add(base)
        sweep_stale(Path(base))
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    started = _started(os.getpid())
    if started is not None:  # (where it cannot be told, no maker is written, and the folder is never swept)
        (folder / MAKER).write_text(f"{os.getpid()} {started}\n")
    return folder


def sweep_stale(base: Path) -> list[str]:
    """Remove the folders (:data:`PREFIXES`) in ``base`` that a process of this user made and did not remove because
    it was killed: their maker is no longer running (no such process, or another one with its pid). Another user's
    folder, a link, and a folder whose maker is running or not yet written are left alone; what cannot be removed
    is left too (grading goes on). Returns the names removed."""
    removed = []
    for entry in os.scandir(base):
        try:
            if not entry.name.startswith(PREFIXES) or not entry.is_dir(follow_symlinks=False) or \
                    entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue
            with open(os.open(os.path.join(entry.path, MAKER), os.O_RDONLY | os.O_NOFOLLOW)) as f:
                pid, started = f.read().split()
            if _started(int(pid)) == started:
                continue
            remove(entry.path)
        except Exception:  # gone meanwhile (another process swept it), or not ours to remove: never fatal
            continue
        removed.append(entry.name)
    return removed

"""A folder a student owns, taken once: every component opened from its parent's file descriptor, never by path.

A student owns her folder of the exchange's ``inbound/`` and everything in it, and can change it while the grader
reads it: rename a sub-folder and put a link in its place between the grader's look and its copy (inotify tells her
when the grader opens her notebook, ``renameat2(RENAME_EXCHANGE)`` swaps atomically). So what is checked must be what
is read: :func:`take` opens the folder with ``O_NOFOLLOW | O_DIRECTORY`` from the descriptor of its parent, each
entry from the descriptor of its folder (``O_NOFOLLOW``, never a path), checks each opened object with ``fstat``
(type, owner, size, that it is the object the folder listed) before reading it, and copies what it read into a
folder of the grader's. A folder whose entries change while it is read, or a file whose size or times change, makes
the whole snapshot refused ("changed while it was read"): the next collect takes it again. Grading reads only the
copy.

The snapshot also says when the hand-in last changed: the latest inode change time of anything in it (a folder's
changes when an entry is added, removed or renamed; a file's when it is written, renamed or linked), which no user
can set back.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

#: How many entries (files and folders) a snapshot takes at most, and how deep its folders may nest.
MAX_ENTRIES = 10_000
MAX_DEPTH = 32

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_CHUNK = 1 << 20


@dataclass
class Snapshot:
    """What :func:`take` copied: the files (relative POSIX path, size), those refused with why, or why the whole
    folder was refused; when anything in it last changed; a digest of its names and contents."""

    files: list = field(default_factory=list)
    refused: list = field(default_factory=list)
    whole: str = ""
    changed: float = 0.0
    digest: str = ""
    too_big: bool = False  # files were left out because the folder's files passed ``max_total`` in all

    def problems(self) -> list[str]:
        from .files import display_name

        return [self.whole] if self.whole else [f"{display_name(rel)}: {why}" for rel, why in self.refused]

    def has(self, rel: str) -> bool:
        return any(r == rel for r, _ in self.files)


class _Refused(Exception):
    """The whole snapshot is refused (strict mode: a link, a special file, another user's file; any mode: a change
    while it was read)."""


def kind_problem(mode: int) -> str | None:
    """Why an object of this mode is not hand-in data (None: a file or a folder)."""
    if stat.S_ISLNK(mode):
        return "a symbolic link: links are never followed, hand in the file itself"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO), not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file, not a file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a file"
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "not a regular file"
    return None


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class _Walk:
    def __init__(self, dest: Path | None, owner: int | None, strict: bool, ignore, max_file: int, max_total: int):
        self.dest, self.owner, self.strict, self.ignore = dest, owner, strict, ignore
        self.max_file, self.max_total = max_file, max_total
        self.snap = Snapshot()
        self.total = self.entries = 0
        self.links: dict[tuple[int, int], list] = {}
        self.hash = hashlib.sha256()
        self.changed_ns = 0

    def problem(self, rel: str, why: str, link: str | None = None) -> None:
        """``rel`` is not taken: in strict mode the whole snapshot is refused; else it is left out (a link copied as
        the same link, never its target)."""
        if self.strict:
            from .files import display_name

            raise _Refused(f"holds {display_name(rel)}, {why.split(':')[0]}: nothing of it is collected")
        self.snap.refused.append((rel, why))
        if link is not None and self.dest is not None:
            (self.dest / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(link, self.dest / rel)

    def folder(self, fd: int, rel: str, depth: int) -> None:
        before = os.fstat(fd)
        if depth > MAX_DEPTH:
            raise _Refused(f"its folders nest deeper than {MAX_DEPTH}")
        if self.dest is not None:
            (self.dest / rel).mkdir(parents=True, exist_ok=True)
        try:
            names = sorted(os.listdir(fd))
        except OSError as exc:
            raise _Refused(f"{rel or 'its folder'} cannot be read ({exc.strerror})") from None
        from .files import IGNORED

        for name in names:
            path = f"{rel}/{name}" if rel else name
            if name in IGNORED:
                continue
            if self.ignore is not None:
                try:
                    listed = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    raise _Refused(f"{path} changed while it was read") from None
                if self.ignore(path, listed):
                    continue
            self.entries += 1
            if self.entries > MAX_ENTRIES:
                raise _Refused(f"it holds more than {MAX_ENTRIES} files and folders")
            self.entry(fd, name, path, depth)
        after = os.fstat(fd)
        if (after.st_ctime_ns, after.st_mtime_ns) != (before.st_ctime_ns, before.st_mtime_ns):
            raise _Refused(f"{rel or 'the folder'} changed while it was read")
        self.changed_ns = max(self.changed_ns, after.st_ctime_ns)

    def entry(self, parent: int, name: str, rel: str, depth: int) -> None:
        try:
            seen = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            raise _Refused(f"{rel} changed while it was read") from None
        why = kind_problem(seen.st_mode)
        if why:
            link = os.readlink(name, dir_fd=parent) if stat.S_ISLNK(seen.st_mode) else None
            self.problem(rel, why, link)
            return
        if self.owner is not None and seen.st_uid != self.owner:
            self.problem(rel, "written by another user")
            return
        is_dir = stat.S_ISDIR(seen.st_mode)
        if not is_dir and seen.st_size > self.max_file:
            self.snap.refused.append((rel, f"larger than {self.max_file // 2**20} MiB ({seen.st_size / 2**20:.0f} MiB)"))
            return
        if not is_dir and self.total + seen.st_size > self.max_total:
            self.snap.too_big = True
            self.snap.refused.append((rel, f"the hand-in's files pass {self.max_total // 2**20} MiB in all here"))
            return
        try:
            fd = os.open(name, _DIRECTORY if is_dir else _FILE, dir_fd=parent)
        except OSError as exc:  # ELOOP: it became a link; ENOENT: it went; ENXIO: a socket
            raise _Refused(f"{rel} changed while it was read ({errno.errorcode.get(exc.errno, exc.errno)})") from None
        try:
            opened = os.fstat(fd)
            if not _same(opened, seen) or stat.S_IFMT(opened.st_mode) != stat.S_IFMT(seen.st_mode) \
                    or (self.owner is not None and opened.st_uid != self.owner):
                raise _Refused(f"{rel} changed while it was read")
            if is_dir:
                self.folder(fd, rel, depth + 1)
            else:
                self.file(fd, rel, opened)
        finally:
            os.close(fd)

    def file(self, fd: int, rel: str, opened: os.stat_result) -> None:
        self.hash.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        out = None
        if self.dest is not None:
            out = os.open(self.dest / rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                          stat.S_IMODE(opened.st_mode) & 0o755 | 0o600)
        try:
            left = opened.st_size
            while left > 0:
                chunk = os.read(fd, min(_CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                self.hash.update(chunk)
                if out is not None:
                    os.write(out, chunk)
            after = os.fstat(fd)
            if left or os.read(fd, 1) or (after.st_size, after.st_mtime_ns, after.st_ctime_ns) != \
                    (opened.st_size, opened.st_mtime_ns, opened.st_ctime_ns):
                raise _Refused(f"{rel} changed while it was read")
        finally:
            if out is not None:
                os.close(out)
        self.hash.update(b"\0")
        self.total += opened.st_size
        self.changed_ns = max(self.changed_ns, opened.st_ctime_ns)
        self.snap.files.append((rel, opened.st_size))
        if opened.st_nlink > 1:
            self.links.setdefault((opened.st_dev, opened.st_ino), [opened.st_nlink, []])[1].append(rel)

    def outside_links(self) -> None:
        """Files hard-linked to a file outside the folder are left out (their other name is somebody's path)."""
        outside = {rel for nlink, rels in self.links.values() if nlink > len(rels) for rel in rels}
        if not outside:
            return
        self.snap.files = [(rel, size) for rel, size in self.snap.files if rel not in outside]
        for rel in sorted(outside):
            self.snap.refused.append((rel, "a hard link to a file outside the hand-in"))
            if self.dest is not None:
                (self.dest / rel).unlink()


def take(parent: Path, name: str, dest: Path | None = None, owner: int | None = None, strict: bool = False,
         ignore=None, max_file: int | None = None, max_total: int | None = None) -> Snapshot:
    """Rule: a folder a student owns is read once, through file descriptors (see the module). Copies the folder
    ``name`` of ``parent`` (a folder of the grader's, opened by path) into ``dest`` (which must not exist; None:
    read only, for the digest and the time), checking what it opens:

    * the folder itself is a real folder, not a link (else the whole is refused), owned by ``owner`` if given;
    * each entry is opened from its folder's descriptor with ``O_NOFOLLOW`` and must be the object listed; a link,
      a pipe, a socket or a device is refused (``strict``: the whole folder; else left out, a link copied as the
      same link), as is, where ``owner`` is given, an entry of another user;
    * a file over ``max_file`` bytes, files past ``max_total`` in all, and a file hard-linked to one outside the
      folder are left out and reported;
    * a folder whose entries, or a file whose size or times, change while it is read make the whole refused.

    ``ignore(rel, st)`` (``st`` the entry's own ``lstat``) leaves entries out without a word. A refused whole leaves nothing in ``dest``."""
    from .files import MAX_FILE_BYTES, MAX_HANDIN_BYTES, display_name

    walk = _Walk(None if dest is None else Path(dest), owner, strict, ignore,
                 MAX_FILE_BYTES if max_file is None else max_file, MAX_HANDIN_BYTES if max_total is None else max_total)
    snap = walk.snap
    try:
        top = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        snap.whole = f"{display_name(str(parent))} cannot be read ({exc.strerror})"
        return snap
    made = False
    try:
        try:
            seen = os.stat(name, dir_fd=top, follow_symlinks=False)
        except OSError as exc:
            raise _Refused(f"it cannot be read ({exc.strerror})") from None
        why = kind_problem(seen.st_mode) or (None if stat.S_ISDIR(seen.st_mode) else "not a folder")
        if why:
            raise _Refused(f"the hand-in folder {display_name(name)} is {why.split(':')[0]}")
        try:
            fd = os.open(name, _DIRECTORY, dir_fd=top)
        except OSError as exc:
            raise _Refused(f"it changed while it was read ({errno.errorcode.get(exc.errno, exc.errno)})") from None
        try:
            opened = os.fstat(fd)
            if not _same(opened, seen):
                raise _Refused("it changed while it was read")
            if owner is not None and opened.st_uid != owner:
                raise _Refused(f"it is owned by uid {opened.st_uid}, not by the student's uid {owner}")
            if dest is not None:
                Path(dest).mkdir(parents=True)
                made = True
            walk.folder(fd, "", 0)
        finally:
            os.close(fd)
        walk.outside_links()
    except _Refused as exc:
        snap.whole, snap.files = str(exc), []
        if made:
            shutil.rmtree(dest, ignore_errors=True)
        return snap
    finally:
        os.close(top)
    snap.refused.sort()
    snap.changed = walk.changed_ns / 1e9
    snap.digest = walk.hash.hexdigest()
    return snap


def read_view(parent: Path, name: str, owner: int | None, small: str, limit: int = 256):
    """The folder ``name`` of ``parent`` read through file descriptors without copying it: the text of its small
    regular file ``small`` (None if it is not one of at most ``limit`` bytes), the names it holds and its inode change
    time; None when it is not a real folder (owned by ``owner`` where given)."""
    try:
        top = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fd = os.open(name, _DIRECTORY, dir_fd=top)
    except OSError:
        return None
    finally:
        os.close(top)
    try:
        info = os.fstat(fd)
        if owner is not None and info.st_uid != owner:
            return None
        names = sorted(os.listdir(fd))
        text = None
        try:
            small_fd = os.open(small, _FILE, dir_fd=fd)
        except OSError:
            small_fd = None
        if small_fd is not None:
            try:
                st = os.fstat(small_fd)
                if stat.S_ISREG(st.st_mode) and st.st_size <= limit and st.st_nlink == 1:
                    text = os.read(small_fd, limit).decode("utf-8", errors="replace")
            finally:
                os.close(small_fd)
        return text, names, info.st_ctime
    except OSError:
        return None
    finally:
        os.close(fd)

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
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

#: The largest single file of a hand-in, and the most all its files may hold together.
MAX_FILE_BYTES = 32 * 2**20
MAX_HANDIN_BYTES = 128 * 2**20
#: Names nbgrader itself never copies (its ``CourseDirectory.ignore``), passed over without a word.
IGNORED = (".ipynb_checkpoints", "__pycache__", ".autograde-fingerprint")


def display_name(name: str) -> str:
    """A file name from a hand-in as it may be printed (terminal, CSV, a page): control characters escaped."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", name)


#: How many entries (files and folders, ignored ones included) a snapshot reads at most, how deep its folders may
#: nest, and how long a path in it may be (every later copy of it, a worker's scratch course included, must fit).
MAX_ENTRIES = 10_000
MAX_DEPTH = 32
MAX_PATH = 1024

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
        return [self.whole] if self.whole else [f"{display_name(rel)}: {why}" for rel, why in self.refused]

    def has(self, rel: str) -> bool:
        return any(r == rel for r, _ in self.files)


class _Refused(Exception):
    """The whole snapshot is refused (strict mode: a link, a special file, another user's file; any mode: a change
    while it was read, a folder too large or too deep). Its text is the grader's, names escaped."""


def _named(rel: str) -> str:
    return display_name(rel)


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


def _changed(rel: str) -> _Refused:
    return _Refused(f"{_named(rel) if rel else 'its folder'} changed while it was read")


class _Walk:
    def __init__(self, dest: Path | None, owner: int | None, strict: bool, ignore, max_file: int, max_total: int,
                 read: bool):
        self.dest, self.owner, self.strict, self.ignore, self.read = dest, owner, strict, ignore, read
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
            raise _Refused(f"holds {_named(rel)}, {why.split(':')[0]}: nothing of it is collected")
        self.snap.refused.append((rel, why))
        if link is not None and self.dest is not None:
            (self.dest / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(link, self.dest / rel)

    def names(self, fd: int, rel: str) -> list[str]:
        """The names in the folder ``fd``, read as a stream and stopped past the limit (never a whole huge list)."""
        found = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    self.entries += 1
                    if self.entries > MAX_ENTRIES:
                        raise _Refused(f"it holds more than {MAX_ENTRIES} files and folders")
                    found.append(entry.name)
        except OSError as exc:
            raise _Refused(f"{_named(rel) if rel else 'its folder'} cannot be read ({exc.strerror})") from None
        return sorted(found)

    def folder(self, fd: int, rel: str, depth: int) -> None:
        before = os.fstat(fd)
        if depth > MAX_DEPTH:
            raise _Refused(f"its folders nest deeper than {MAX_DEPTH}")
        if self.dest is not None:
            (self.dest / rel).mkdir(parents=True, exist_ok=True)
        for name in self.names(fd, rel):
            path = f"{rel}/{name}" if rel else name
            if name in IGNORED:
                continue
            if len(path) > MAX_PATH or len(os.fsencode(name)) > 255:
                raise _Refused(f"a path in it is longer than {MAX_PATH} characters")
            try:
                seen = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                raise _changed(path) from None
            if self.ignore is not None and self.ignore(path, seen):
                continue
            self.entry(fd, name, path, depth, seen)
        after = os.fstat(fd)
        if (after.st_ctime_ns, after.st_mtime_ns) != (before.st_ctime_ns, before.st_mtime_ns):
            raise _changed(rel)
        self.changed_ns = max(self.changed_ns, after.st_ctime_ns)

    def entry(self, parent: int, name: str, rel: str, depth: int, seen: os.stat_result) -> None:
        why = kind_problem(seen.st_mode)
        if why:
            link = os.readlink(name, dir_fd=parent) if stat.S_ISLNK(seen.st_mode) and not self.strict else None
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
        if not is_dir and not self.read:  # a look: the file as its folder (opened by descriptor) lists it
            self.taken(rel, seen)
            return
        try:
            fd = os.open(name, _DIRECTORY if is_dir else _FILE, dir_fd=parent)
        except OSError as exc:  # ELOOP: it became a link; ENOENT: it went; ENXIO: a socket; EAGAIN: a lease
            raise _Refused(f"{_named(rel)} changed while it was read "
                           f"({errno.errorcode.get(exc.errno, exc.errno)})") from None
        try:
            opened = os.fstat(fd)
            if not _same(opened, seen) or stat.S_IFMT(opened.st_mode) != stat.S_IFMT(seen.st_mode) \
                    or (self.owner is not None and opened.st_uid != self.owner):
                raise _changed(rel)
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
                raise _changed(rel)
        finally:
            if out is not None:
                os.close(out)
        self.hash.update(b"\0")
        self.taken(rel, opened)

    def taken(self, rel: str, st: os.stat_result) -> None:
        self.total += st.st_size
        self.changed_ns = max(self.changed_ns, st.st_ctime_ns)
        self.snap.files.append((rel, st.st_size))
        if st.st_nlink > 1:
            self.links.setdefault((st.st_dev, st.st_ino), [st.st_nlink, []])[1].append(rel)

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
         ignore=None, max_file: int | None = None, max_total: int | None = None, read: bool = True) -> Snapshot:
    """Rule: a folder a student owns is read once, through file descriptors (see the module). Copies the folder
    ``name`` of ``parent`` (a folder of the grader's, opened by path) into ``dest`` (which must not exist; None:
    not copied), checking what it opens:

    * the folder itself is a real folder, not a link (else the whole is refused), owned by ``owner`` if given;
    * each entry is opened from its folder's descriptor with ``O_NOFOLLOW`` and must be the object listed; a link,
      a pipe, a socket or a device is refused (``strict``: the whole folder; else left out, a link copied as the
      same link), as is, where ``owner`` is given, an entry of another user;
    * a file over ``max_file`` bytes, files past ``max_total`` in all, and a file hard-linked to one outside the
      folder are left out and reported;
    * a folder whose entries, or a file whose size or times, change while it is read make the whole refused, and
      so do more than :data:`MAX_ENTRIES` entries, folders deeper than :data:`MAX_DEPTH` or a path longer than
      :data:`MAX_PATH`.

    ``ignore(rel, st)`` (``st`` the entry's own ``lstat``) leaves entries out without a word. ``read`` False: a look,
    which opens the folders (never a file) and takes each file's kind, owner, size and time from its folder's
    listing: no content, no digest. A refused whole, or any error, leaves nothing in ``dest``."""
    walk = _Walk(None if dest is None else Path(dest), owner, strict, ignore,
                 MAX_FILE_BYTES if max_file is None else max_file, MAX_HANDIN_BYTES if max_total is None else max_total,
                 read)
    snap = walk.snap
    try:
        top = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        snap.whole = f"{_named(str(parent))} cannot be read ({exc.strerror})"
        return snap
    made = False
    try:
        try:
            seen = os.stat(name, dir_fd=top, follow_symlinks=False)
        except OSError as exc:
            raise _Refused(f"it cannot be read ({exc.strerror})") from None
        why = kind_problem(seen.st_mode) or (None if stat.S_ISDIR(seen.st_mode) else "not a folder")
        if why:
            raise _Refused(f"the hand-in folder {_named(name)} is {why.split(':')[0]}")
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
    except BaseException:
        if made:
            shutil.rmtree(dest, ignore_errors=True)
        raise
    finally:
        os.close(top)
    snap.refused.sort()
    snap.changed = walk.changed_ns / 1e9
    snap.digest = walk.hash.hexdigest() if read else ""
    return snap


def read_view(parent: Path, name: str, owner: int | None, small: str, wanted=(), limit: int = 256):
    """The folder ``name`` of ``parent`` read through file descriptors without copying it: the text of its small
    regular file ``small`` (None if it is not one of at most ``limit`` bytes), which of the names ``wanted`` are
    regular files in it (looked up one by one: a folder of millions of names costs nothing) and its inode change
    time; None when it is not a real folder (owned by ``owner`` where given). Never blocks (a FIFO, a lease)."""
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
        present = []
        for item in wanted:
            try:
                if stat.S_ISREG(os.stat(item, dir_fd=fd, follow_symlinks=False).st_mode):
                    present.append(item)
            except (OSError, ValueError):
                pass
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
        return text, present, info.st_ctime
    except OSError:
        return None
    finally:
        os.close(fd)

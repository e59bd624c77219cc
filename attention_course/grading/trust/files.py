"""Trust rules on a hand-in's files: they are data, copies never follow links, the exchange's small files are
re-written from validated values, and ids and file names are plain before they reach nbgrader, a path or a page."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .snapshot import IGNORED, MAX_FILE_BYTES, MAX_HANDIN_BYTES, display_name, take
from .snapshot import kind_problem as _kind


@dataclass
class Handin:
    """What :func:`inspect_handin` found: the files that may be read, and those refused with the reason."""

    root: Path
    files: list = field(default_factory=list)  # (absolute path, relative POSIX path, size)
    refused: list = field(default_factory=list)  # (relative POSIX path, why)

    def problems(self) -> list[str]:
        return [why if rel == "." else f"{display_name(rel)}: {why}" for rel, why in self.refused]

    @property
    def whole(self) -> bool:
        """Whether the hand-in was refused as a whole (its folder, or a folder above it, is not a folder)."""
        return any(rel == "." for rel, _ in self.refused)

    def readable(self, rel: str) -> bool:
        return any(r == rel for _, r, _ in self.files)


def inspect_handin(root: Path, within: Path | None = None, max_file: int = MAX_FILE_BYTES,
                   max_total: int = MAX_HANDIN_BYTES) -> Handin:
    """Rule: hand-in files are data. Walks ``root`` with ``lstat`` only and sorts every entry into the files
    that may be read and those refused: symbolic links (to anything), named pipes, sockets, device files,
    files hard-linked to a file outside the hand-in, files over ``max_file`` bytes, and files past
    ``max_total`` bytes in all. ``root`` itself, and every folder between ``within`` and it, must be a real
    folder (not a link), or the whole hand-in is refused."""
    handin = Handin(Path(root))
    chain = [Path(root)]
    if within is not None:
        rel = Path(root).relative_to(within)
        chain = [Path(within).joinpath(*rel.parts[: i + 1]) for i in range(len(rel.parts))]
    for folder in chain:
        try:
            mode = os.lstat(folder).st_mode
        except OSError:
            return handin
        why = _kind(mode) or (None if stat.S_ISDIR(mode) else "not a folder")
        if why:
            name = os.path.relpath(folder, within) if within is not None else folder.name
            handin.refused.append((".", f"the hand-in folder {display_name(name)} is {why.split(':')[0]}"))
            return handin
    total, links = 0, {}

    def walk(folder: Path, prefix: str) -> None:
        nonlocal total
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            handin.refused.append((prefix or ".", f"cannot be read ({exc.strerror})"))
            return
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            if entry.name in IGNORED:
                continue
            st = entry.stat(follow_symlinks=False)
            why = _kind(st.st_mode)
            if why:
                handin.refused.append((rel, why))
            elif stat.S_ISDIR(st.st_mode):
                walk(Path(entry.path), rel + "/")
            elif st.st_size > max_file:
                handin.refused.append((rel, f"larger than {max_file // 2**20} MiB ({st.st_size / 2**20:.0f} MiB)"))
            elif total + st.st_size > max_total:
                handin.refused.append((rel, f"the hand-in's files pass {max_total // 2**20} MiB in all here"))
            else:
                total += st.st_size
                handin.files.append((Path(entry.path), rel, st.st_size))
                if st.st_nlink > 1:
                    links.setdefault((st.st_dev, st.st_ino), [st.st_nlink, []])[1].append(rel)

    walk(Path(root), "")
    outside = {rel for nlink, rels in links.values() if nlink > len(rels) for rel in rels}
    if outside:
        handin.files = [f for f in handin.files if f[1] not in outside]
        handin.refused += [(rel, "a hard link to a file outside the hand-in") for rel in sorted(outside)]
    handin.refused.sort()
    return handin


def submitted(course: Path, student: str, assignment: str) -> Handin:
    """:func:`inspect_handin` of ``submitted/<student>/<assignment>`` (the student's folder checked too)."""
    return inspect_handin(Path(course) / "submitted" / student / assignment, within=Path(course) / "submitted")


def kernel_files(course: Path, student: str | None, assignment: str) -> list[tuple[Path, str]]:
    """Rule: a kernel is handed the hand-in's own files and what the release gives every student, nothing else of
    the course. Returns (path, relative POSIX path) of the files :func:`inspect_handin` accepts in
    ``submitted/<student>/<assignment>`` and in ``release/<assignment>`` (a release file wins over a hand-in's
    file of the same name), notebooks aside (the grader runs those cell by cell); ``student`` None: the release's
    alone. Never a file of ``source/`` (catalogues, masters, hidden tests), the gradebook, the exchange or
    another hand-in."""
    found: dict[str, tuple[Path, str]] = {}
    release = inspect_handin(Path(course) / "release" / assignment, within=Path(course) / "release")
    for handin in ([] if student is None else [submitted(course, student, assignment)]) + [release]:
        for path, rel, _ in handin.files:
            if not rel.endswith(".ipynb"):
                found[rel] = (path, rel)
    return list(found.values())


def safe_copy(src: Path, dest: Path, log=None, ignore=None, max_total: int | None = None):
    """Rule: copies never follow links. Copies the folder ``src`` to ``dest`` (which must not exist) through file
    descriptors (:func:`.snapshot.take`: what is checked is what is copied, whatever changes meanwhile): its
    regular files and folders are copied, a symbolic link is copied as the same link (never its target, so that
    the refusal is reported where the hand-in is graded), and anything else refused is left out; a folder that
    changes while it is copied is refused whole. ``ignore(rel, st)`` leaves entries out without a word. Returns the
    :class:`.snapshot.Snapshot` (its ``problems()`` are also logged as warnings)."""
    snap = take(Path(src).parent, Path(src).name, Path(dest), ignore=ignore, max_total=max_total)
    Path(dest).mkdir(parents=True, exist_ok=True)
    for problem in snap.problems():
        if log is not None:
            log.warning("not copied from %s: %s", src, problem)
    return snap


def read_small(path: Path, limit: int = 4096) -> str | None:
    """The text of a small regular file (a hand-in's ``timestamp.txt``), never through a link; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit or st.st_nlink > 1:
            return None
        return os.read(fd, limit).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


#: The exchange's own small files that travel with a hand-in (nbgrader's release_feedback needs them beside
#: the feedback page): each is re-written from its validated value, never copied.
EXCHANGE_FILES = {"timestamp.txt": re.compile(r"\d{4}-\d{2}-\d{2}[ T][\d:.]+( ?(UTC|[+-]\d{2}:?\d{2}|Z))?"),
                  "submission_secret.txt": re.compile(r"[A-Za-z0-9_-]{1,128}")}


def exchange_metadata(folder: Path) -> dict[str, str]:
    """The exchange's small files in ``folder`` that are regular files and have the expected form."""
    found = {}
    for name, form in EXCHANGE_FILES.items():
        text = read_small(Path(folder) / name, 256)
        if text is not None and form.fullmatch(text.strip()):
            found[name] = text.strip()
    return found


def write_exchange_metadata(folder: Path, metadata: dict[str, str]) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    for name, text in metadata.items():
        if name in EXCHANGE_FILES and EXCHANGE_FILES[name].fullmatch(text):
            (Path(folder) / name).write_text(text)


_PLAIN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,127}")


def plain_id(name: str) -> bool:
    """Rule: a student or assignment id is a plain name, safe to hand to nbgrader and to use in paths
    (nbgrader treats ids as glob patterns, where ``*`` would select every student, and as path parts)."""
    return bool(_PLAIN_ID.fullmatch(name)) and ".." not in name

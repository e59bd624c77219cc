"""What ``make hub`` keeps of a trial's instructor when it stops: her account and home are removed with the class,
so her work (the gradebook, grades, feedback, hand-ins, settings, the grading service's log) is copied first into a
root-only folder beside where ``make hub`` was started (:func:`save_work`, called by :func:`.hub.remove_class`)."""

from __future__ import annotations

import datetime
import os
import shutil
import stat
from pathlib import Path

from ..course import ROOT

#: What a trial keeps of the instructor's course folder when it stops (patterns relative to it; folders whole):
#: the gradebook, grades and Canvas export, feedback, hand-ins as collected and graded, the term's and the service's
#: settings, the service's queue and log, collect's refusals, the report. Her changes to ``source/`` are kept too
#: (:func:`save_work`).
KEPT = ("gradebook.db*", "grades.csv", "grades-canvas.csv", "feedback", "autograded", "submitted", "extensions.csv",
        "nbgrader_config.py", "student_logins.csv", "collect-refused.jsonl", "service.log*",
        ".grading-service/queue.sqlite*", "report")


def _keep(src: Path, dest: Path, rel: str, skipped: list[str]) -> int:
    """Copy ``src`` to ``dest``: folders and regular files only, each opened without following a link (a link, a
    pipe or a device is left out and named in ``skipped``), files 0600 and folders 0700, root's; returns the bytes
    copied."""
    st = os.lstat(src)
    if stat.S_ISDIR(st.st_mode):
        dest.mkdir(mode=0o700, exist_ok=True)
        copied = 0
        for name in sorted(os.listdir(src)):
            copied += _keep(src / name, dest / name, f"{rel}/{name}", skipped)
        return copied
    if not stat.S_ISREG(st.st_mode):
        skipped.append(rel)
        return 0
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with open(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):  # replaced since the look
            skipped.append(rel)
            return 0
        with open(os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
            copied = out.tell()
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
    return copied


def save_work(klass, where: Path) -> Path:
    """Copy the work of the instructor of ``klass`` (a :class:`.hub.Class`): :data:`KEPT`, and each file of her
    ``source/`` that differs from this repository's or that it lacks, into a new folder ``hub-trial-<date>-<time>``
    of ``where``, root's and 0700 (grades and hand-ins: nobody else's to read), with a ``README.txt`` saying what it
    holds and what was left out. Call it when none of her processes runs any more (:func:`.hub.remove_class` does).
    Returns the folder."""
    course = Path(klass.course)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M%S")
    for n in range(100):
        dest = Path(where).resolve() / (f"hub-trial-{stamp}" + (f"-{n}" if n else ""))
        try:
            dest.mkdir(mode=0o700)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"{where}/hub-trial-{stamp}*: a hundred of them already")
    dest.chmod(0o700)
    skipped: list[str] = []
    kept: list[str] = []
    copied = 0
    real = course.resolve()
    for pattern in KEPT:
        for src in sorted(course.glob(pattern)):
            rel = str(src.relative_to(course))
            if Path(os.path.realpath(src.parent)) != real / Path(rel).parent:  # found through a linked folder
                skipped.append(rel)
                continue
            (dest / rel).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            copied += _keep(src, dest / rel, rel, skipped)
            kept.append(rel)
    changed = []
    if (course / "source").is_dir() and not (course / "source").is_symlink():
        for folder, _, files in os.walk(course / "source"):  # never into a link
            for name in files:
                src = Path(folder) / name
                rel = str(src.relative_to(course))
                mine = ROOT / rel
                if not src.is_symlink() and src.is_file() and mine.is_file() and src.read_bytes() == mine.read_bytes():
                    continue
                (dest / rel).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                copied += _keep(src, dest / rel, rel, skipped)
                changed.append(rel)
    for folder, _, _ in os.walk(dest):  # (mkdir's parents take the umask's mode)
        os.chmod(folder, 0o700)
    (dest / "README.txt").write_text(
        f"What make hub kept of the trial's instructor {klass.instructor} ({course}) when it stopped, "
        f"{datetime.datetime.now():%Y-%m-%d %H:%M}; her account and home are removed.\n\n"
        f"Kept ({copied} bytes): {', '.join(kept) or 'nothing of ' + ', '.join(KEPT)}.\n"
        f"Her changes to source/ (files that differ from the repository's or that it lacks): "
        f"{', '.join(changed) or 'none'}.\n"
        f"Left out (links, pipes, devices: never followed): {', '.join(skipped) or 'nothing'}.\n"
        "To look at the grades again: copy these into a course folder (make install there) and run make grades.\n")
    (dest / "README.txt").chmod(0o600)
    return dest

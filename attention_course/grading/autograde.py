"""Grade a whole class in parallel: ``python -m attention_course.grading autograde``.

Each worker process loads nbgrader and the course configuration once, starts one fork server
(:mod:`attention_course.grading.forkserver`) with numpy, torch and matplotlib imported, and then autogrades one
submission after another with nbgrader's own ``Autograde`` converter, the same pipeline ``nbgrader autograde``
runs (sanitize, judged execution, ``SaveAutoGrades``, late penalties): a kernel process of its own per notebook.

A submission is skipped when it was graded before and nothing that decides its grade changed: its files, the
assignment's source, the gradebook's copy of its tests and points, the course configuration and the course package
(a fingerprint in ``autograded/<student>/<assignment>/.autograde-fingerprint``), and the gradebook still holds its
grades. ``--force`` grades everything again. Every hand-in whose score a run changed reaches its student
(:mod:`.regrade`).

Before anything is planned, an assignment whose tests or points in the gradebook are no longer those of ``source/``
(a test fixed after the release) is put into the gradebook again from ``source/``, as ``make release`` does, and
said so: no hand-in is graded with tests that differ from ``source/`` (the sanitize step refuses such a notebook,
:class:`.nbgrader_ext.TrustGradebook`), and every hand-in the change affects is graded again, with each total that
changed printed before -> after.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from . import regrade, trust
from .course import PACKAGE_DIR, available, gradebook_url, unusable_folders
from .gradebook import changed_scores, digest, refresh_tests, total_scores
from .service_workers import drop_pool

FINGERPRINT = ".autograde-fingerprint"


@dataclass
class Job:
    assignment: str
    student: str
    fingerprint: str


def hash_tree(digest, root: Path, skip=()) -> None:
    if not root.exists():
        digest.update(b"<missing>")
        return
    paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    for path in paths:
        rel = path.relative_to(root).as_posix() if path != root else path.name
        if any(part in skip or part.startswith(".ipynb_checkpoints") for part in Path(rel).parts):
            continue
        digest.update(rel.encode() + b"\0")
        try:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        except OSError:
            digest.update(b"<unreadable>")


def course_fingerprint(course: Path, assignment: str) -> str:
    """What decides every grade of an assignment besides the hand-in: source, the files its release gives every
    kernel (:func:`.trust.kernel_files`), configuration, course package."""
    digest = hashlib.sha256()
    hash_tree(digest, course / "source" / assignment)
    hash_tree(digest, course / "release" / assignment, skip=tuple(
        p.name for p in (course / "release" / assignment).glob("*.ipynb")))
    hash_tree(digest, course / "nbgrader_config.py")
    hash_tree(digest, PACKAGE_DIR, skip=("__pycache__",))
    return digest.hexdigest()


def fingerprint(course: Path, assignment: str, student: str, base: str, extra: str = "") -> str:
    """What decides a hand-in's grade: ``base`` (:func:`course_fingerprint`), ``extra`` (the student's extension),
    the files it may be graded on (:func:`.trust.submitted`) and what was refused, a link with the path it points
    to."""
    digest = hashlib.sha256((base + extra).encode())
    handin = trust.submitted(course, student, assignment)
    for path, rel, _ in handin.files:
        digest.update(rel.encode() + b"\0")
        try:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        except OSError:
            digest.update(b"<unreadable>")
    for rel, why in handin.refused:
        try:
            target = os.readlink(handin.root / rel) if rel != "." else os.readlink(handin.root)
        except OSError:
            target = ""
        digest.update(f"refused\0{rel}\0{why}\0{target}\0".encode())
    return digest.hexdigest()


def grading_base(course: Path, db_url: str, course_id: str, assignment: str, course_print: str = "") -> str:
    """:func:`course_fingerprint` (``course_print`` where known) and the gradebook's copy of the tests and points."""
    return (course_print or course_fingerprint(course, assignment)) + digest(db_url, course_id, assignment)


def handin_fingerprint(course: Path, assignment: str, student: str, base: str, term) -> str:  # plan, the service
    """:func:`fingerprint` of a student's hand-in, their extension in the term included (what the skip compares)."""
    return fingerprint(course, assignment, student, base, f"extension {term.extension(student, assignment)}")


def sandbox_settings(course: Path, app=None) -> dict:
    """The kernel sandbox's settings as the course's configuration sets them (``JudgedExecute``)."""
    from .executor import JudgedExecute

    if app is None:
        from nbgrader.apps.baseapp import NbGrader

        os.chdir(course)
        app = NbGrader()
        app.initialize([])
    return JudgedExecute(parent=app).settings()


def plan(course: Path, assignments: list[str], db_url: str, course_id: str, force: bool):
    """The submissions to grade and those skipped as unchanged."""
    todo, skipped = [], []
    from .term import course_term

    term = course_term(course)
    term.check()
    for assignment in assignments:
        base = grading_base(course, db_url, course_id, assignment)
        graded = set() if force else set(total_scores(db_url, course_id, assignment))
        for folder in sorted((course / "submitted").glob(f"*/{assignment}")):
            if not folder.is_dir() or not trust.plain_id(folder.parent.name):
                continue
            student = folder.parent.name
            job = Job(assignment, student, handin_fingerprint(course, assignment, student, base, term))
            mark = course / "autograded" / student / assignment / FINGERPRINT
            try:
                unchanged = mark.read_text().strip() == job.fingerprint
            except OSError:
                unchanged = False
            (skipped if unchanged and student in graded else todo).append(job)
    return todo, skipped


def register(course: Path, db_url: str, assignment: str) -> None:
    """Put an assignment into the gradebook as ``nbgrader generate_assignment`` would (its notebooks,
    cells, checksums), writing the student version into a scratch folder rather than ``release/``."""
    import tempfile

    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.apps.baseapp import NbGrader

    with tempfile.TemporaryDirectory(prefix="attention-register-") as scratch:
        app = NbGrader()
        app.initialize([])
        app.config.CourseDirectory.root = str(course)
        app.config.CourseDirectory.db_url = db_url
        app.config.CourseDirectory.release_directory = scratch
        app.log.setLevel("ERROR")
        result = NbGraderAPI(parent=app).generate_assignment(assignment, force=True, create=True)
    if not result.get("success"):
        errors = [line for line in result.get("log", "").splitlines() if line.strip()][-12:]
        raise SystemExit(f"{assignment} could not be put into the gradebook {db_url}:\n" + "\n".join(errors))


def prepare_gradebook(course: Path, db_url: str, course_id: str, assignments: list[str], students: set[str],
                      stream=sys.stderr) -> None:
    """Register assignments the gradebook lacks and add missing students, before workers write at once."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url, course_id) as gb:
        missing = []
        for assignment in assignments:
            try:
                gb.find_assignment(assignment)
            except MissingEntry:
                missing.append(assignment)
    for assignment in missing:
        stream.write(f"{assignment} is not in the gradebook yet: registering it from source/{assignment}\n")
        register(course, db_url, assignment)
    with Gradebook(db_url, course_id) as gb:
        known = {s.id for s in gb.students}
        for student in sorted(students - known):
            gb.add_student(student)


# -- workers -----------------------------------------------------------------------------
_API = None


def worker_init(course: str, db_url: str) -> None:
    global _API
    os.chdir(course)
    if db_url.startswith("sqlite") and "?" not in db_url:  # workers take turns to write: wait, do not fail
        db_url += "?timeout=300"
    os.environ.setdefault("MPLBACKEND", "Agg")
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.apps.baseapp import NbGrader

    app = NbGrader()
    app.initialize([])
    app.config.CourseDirectory.root = course
    app.config.CourseDirectory.db_url = db_url
    app.log.setLevel("WARNING")
    _API = NbGraderAPI(parent=app)
    _API.log.setLevel("WARNING")
    from .executor import POOL, JudgedExecute

    executor = JudgedExecute(parent=_API)
    if executor.prestart:  # start the fork server and the first kernel now, while other workers do the same
        POOL.prime(executor.settings(), _API.log)


def worker_api():
    """The nbgrader API of this grading process (set up by :func:`worker_init`)."""
    return _API


def _worker_grade(assignment: str, student: str) -> dict:
    start = time.monotonic()
    result = _API.autograde(assignment, student, force=True, create=False)
    return {"assignment": assignment, "student": student, "success": bool(result.get("success")),
            "log": result.get("log", ""), "error": result.get("error", ""), "seconds": time.monotonic() - start}


# -- progress ----------------------------------------------------------------------------
class Progress:
    """done / total, rate and ETA on one line (a terminal) or one line per submission (a log)."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream
        self.start, self.tty = time.monotonic(), stream.isatty()

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 and self.done else 0.0
        eta = (self.total - self.done) / rate if rate else None
        filled = int(24 * self.done / self.total) if self.total else 24
        bar = "#" * filled + "." * (24 - filled)  # 24 characters wide
        eta_text = "--:--" if eta is None else f"{int(eta) // 60:02d}:{int(eta) % 60:02d}"
        return (f"[{bar}] {self.done}/{self.total}  {rate:.2f} submissions/s  elapsed "
                f"{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}  ETA {eta_text}")

    def note(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text.rstrip("\n") + "\n")
        self.show()

    def advance(self, label: str) -> None:
        self.done += 1
        if self.tty:
            self.show()
        else:
            self.stream.write(f"{self.line()}  {label}\n")
            self.stream.flush()

    def show(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.line())
            self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


#: nbgrader's own words around a failed hand-in's traceback (they name no cause).
_GENERIC = ("There was an error processing assignment", "Please see the")
_RECORD = re.compile(r"\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\] ")
_WHERE = re.compile(r'\s*File "([^"]+)", line (\d+), in (.+)')


def traceback_cause(lines: list[str]) -> str:
    """A traceback's last line (the exception) and where it was raised, as one line."""
    import textwrap

    text = [line for line in textwrap.dedent("\n".join(lines)).splitlines() if line.strip()]
    where = [m for line in text if (m := _WHERE.match(line))]
    exception = next((line.strip() for line in reversed(text) if not line.startswith(" ")), "")
    exception = re.sub(r"^(?:\w+\.)+(?=\w+(?::|$))", "", exception)  # EnvironmentFault, not its module's path
    place = f" (at {os.path.basename(where[-1].group(1))}:{where[-1].group(2)} in {where[-1].group(3)})" if where else ""
    return (exception or "an error without a message") + place


def notable_lines(log: str) -> list[str]:
    """The log lines an instructor should see (warnings and errors), without nbgrader's own noise; a traceback is
    one line: its exception and where it was raised."""
    keep, lines, i = [], log.splitlines(), 0
    while i < len(lines):
        line, i = lines[i], i + 1
        body = []
        while i < len(lines) and not _RECORD.match(lines[i]):  # the record's further lines
            body.append(lines[i])
            i += 1
        if not line.startswith(("[WARNING]", "[ERROR]", "[CRITICAL]")) or "SAWarning" in line \
                or "Removing existing assignment" in line or "Removing failed assignment" in line \
                or line.split("] ", 1)[-1].startswith(_GENERIC):  # nbgrader's words around a failure: the cause says it
            continue
        if "Traceback (most recent call last)" in line:
            line = f"{line.split(']', 1)[0]}] {traceback_cause(body)}"
        keep.append(line)
    return keep


def failure_cause(result: dict) -> str:
    """Why a hand-in was not graded, in one line: the exception its grading raised and where, or the last error."""
    errors = [line.split("] ", 1)[1] for line in notable_lines(result.get("log", "") or "")
              if line.startswith(("[ERROR]", "[CRITICAL]"))]
    if errors:
        return errors[-1]
    error = (result.get("error") or "").strip().splitlines()
    if any("Traceback (most recent call last)" in line for line in error):
        return traceback_cause(error)
    return error[-1] if error else "see the messages above"


def _local(course: Path, db_url: str, todo: list[Job], workers: int):
    """Grade ``todo`` in ``workers`` local processes; yields (job, result) as each finishes."""
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=worker_init,
                             initargs=(str(course), db_url)) as pool:
        futures = {pool.submit(_worker_grade, j.assignment, j.student): j for j in todo}
        for future in as_completed(futures):
            try:
                result = future.result()
            except BrokenProcessPool as exc:  # every call left fails now: never wait on the pool's pipe
                drop_pool(pool)
                result = {"success": False, "log": "", "error": f"the grading worker died ({exc})"}
            except Exception as exc:
                result = {"success": False, "log": "", "error": f"{type(exc).__name__}: {exc}"}
            yield futures[future], result


def check_sandbox(course: Path, app, accept, stream=sys.stderr) -> None:
    """Say which layers of the kernels' sandbox hold on this host; stop (SystemExit) where a required one is missing
    and not among ``accept`` (:func:`.doctor.refused`)."""
    from . import doctor

    settings = sandbox_settings(course, app)
    report = doctor.probe(settings, str(course / "nbgrader_config.py"))
    line, missing = doctor.summary(report, settings)
    stream.write(line + "\n")
    for warning in missing:
        stream.write(f"WARNING: {warning}\n")
    refused = doctor.refused(report, settings, set(accept))
    if refused:
        raise SystemExit(f"Not grading: the sandbox lacks {', '.join(refused)} on this host (see the warnings above "
                         f"for what a hand-in could then do; `make doctor` says how to add them). To grade anyway, "
                         f"accept it: make autograde ACCEPT={','.join(refused)} (or --accept-missing "
                         f"{','.join(refused)}).")


def run(course: Path, assignments: list[str] | None = None, workers: int | None = None, force: bool = False,
        db_url: str | None = None, stream=sys.stderr, scheduler: str | None = None,
        accept: set[str] | frozenset = frozenset()) -> dict:
    """Grade every submission of ``assignments`` (default: all); returns counts and the failures.

    ``scheduler``: the address of a Dask scheduler whose workers grade (:mod:`.cluster`) instead of local
    processes. A required layer of the sandbox missing on this host stops the run before anything is graded
    (:func:`.doctor.refused`), unless it is among ``accept``."""
    from .service_queue import Writer

    course = course.resolve()
    with Writer(course):  # the grading service and this run take turns to write the gradebook
        return _run(course, assignments, workers, force, db_url, stream, scheduler, accept)


def _run(course: Path, assignments, workers, force, db_url, stream, scheduler, accept) -> dict:
    assignments = assignments or available(course)
    unknown = [a for a in assignments if not trust.plain_id(a) or not (course / "source" / a).is_dir()]
    if unknown:
        raise SystemExit(f"no such assignment in {course / 'source'}: {', '.join(unknown)}")
    db_url = db_url or gradebook_url(course)
    os.chdir(course)
    from nbgrader.apps.baseapp import NbGrader

    app = NbGrader()
    app.initialize([])
    course_id = app.coursedir.course_id
    # what the gradebook lacks is registered first: a hand-in's fingerprint holds the gradebook's tests
    prepare_gradebook(course, db_url, course_id, [a for a in assignments if any((course / "submitted").glob(f"*/{a}"))],
                      set(), stream)
    refreshed = refresh_tests(course, db_url, course_id, assignments, register, stream)
    todo, skipped = plan(course, assignments, db_url, course_id, force)
    for name in unusable_folders(course):
        stream.write(f"Not graded: submitted/{ascii(name)} is not a plain student id (letters, digits, _ . @ + -); "
                     "rename the folder and autograde again.\n")
    if skipped:
        stream.write(f"Skipping {len(skipped)} submission(s) already graded and unchanged (make autograde FORCE=1, "
                     "or --force, grades them again).\n")
    summary = {"graded": 0, "skipped": len(skipped), "failed": [], "seconds": 0.0, "workers": 0}
    if not todo:
        stream.write("Nothing to grade.\n")
        return summary
    prepare_gradebook(course, db_url, course_id, sorted({j.assignment for j in todo}), {j.student for j in todo},
                      stream)
    check_sandbox(course, app, accept, stream)
    unstamped = [j for j in todo if not (course / "submitted" / j.student / j.assignment / "timestamp.txt").is_file()]
    if unstamped:
        stream.write(f"{len(unstamped)} hand-in(s) have no timestamp.txt (copied in by hand, not collected): each is "
                     "taken as handed in when its newest notebook was modified; write submitted/<student>/<id>/"
                     "timestamp.txt (as collect does) to give another time.\n")
    what = f"Grading {len(todo)} submission(s) of {', '.join(sorted({j.assignment for j in todo}))}"
    if scheduler:
        from .cluster import grade

        stream.write(f"{what} on the Dask cluster at {scheduler}\n")
        results = grade(course, db_url, todo, scheduler, set(accept))
    else:
        workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
        summary["workers"] = workers
        stream.write(f"{what} with {workers} worker(s)\n")
        results = _local(course, db_url, todo, workers)
    before = {a: total_scores(db_url, course_id, a) for a in sorted({j.assignment for j in todo})}
    cells_before = regrade.snapshot(db_url, course_id, before)
    progress = Progress(len(todo), stream)
    progress.show()
    start = time.monotonic()
    for job, result in results:
        label = f"{job.assignment}/{job.student}"
        cause = None if result["success"] else failure_cause(result)
        for line in notable_lines(result["log"]):
            if cause is None or cause not in line:  # a failure's own traceback is its NOT GRADED line
                progress.note(f"{label}: {line}")
        if result["success"]:
            summary["graded"] += 1
            mark = course / "autograded" / job.student / job.assignment / FINGERPRINT
            if mark.parent.is_dir():
                mark.write_text(job.fingerprint + "\n")
        else:
            progress.note(f"{label}: NOT GRADED: {cause}")
            summary["failed"].append(label)
        where = f", {result['worker']}" if result.get("worker") else ""
        progress.advance(f"{label} ({result.get('seconds', 0.0):.1f} s{where})")
    progress.finish()
    summary["seconds"] = time.monotonic() - start
    stream.write(f"Graded {summary['graded']}, skipped {summary['skipped']} unchanged, "
                 f"failed {len(summary['failed'])} in {summary['seconds']:.1f} s"
                 f" ({summary['seconds'] / len(todo):.2f} s per submission)\n")
    if summary["failed"]:
        stream.write("Not graded (see the messages above): " + ", ".join(summary["failed"]) + "\n")
    summary["changed"] = changed_scores(before, {a: total_scores(db_url, course_id, a) for a in before})
    if summary["changed"]:
        stream.write(f"Scores changed by this run ({len(summary['changed'])}, before -> after): "
                     + ", ".join(f"{a}/{s} {old:g} -> {new:g}" for a, s, old, new in summary["changed"]) + "\n")
    summary["reached"] = regrade.after_run(course, db_url, course_id, cells_before, todo, summary["failed"], refreshed,
                                           force, stream)
    return summary


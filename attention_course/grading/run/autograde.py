"""Grade a whole class in parallel: ``python -m attention_course.grading autograde``.

The run: the gradebook prepared (:func:`.gradebook.prepare_gradebook`), the hand-ins that need grading planned
(:mod:`.plan`: the unchanged ones skipped), the sandbox checked on this host (:mod:`.doctor`), the hand-ins graded by
local grading processes (:mod:`.worker`) or on a Dask cluster (:mod:`.cluster`), progress and causes shown
(:mod:`.progress`), and every hand-in whose score the run changed sent to its student (:mod:`.regrade`).

Before anything is planned, an assignment whose tests or points in the gradebook are no longer those of ``source/``
(a test fixed after the release) is put into the gradebook again from ``source/``, as ``make release`` does, and
said so: no hand-in is graded with tests that differ from ``source/`` (the sanitize step refuses such a notebook,
:class:`.preprocessors.TrustGradebook`), and every hand-in the change affects is graded again, with each total that
changed printed before -> after.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from nbgrader.apps.baseapp import NbGrader

from .. import trust
from ..course import FINGERPRINT, available, gradebook_url, unusable_folders
from ..errors import SandboxUnavailable, UsageError
from ..nbgrader_glue import regrade
from ..nbgrader_glue.gradebook import Writer, changed_scores, prepare_gradebook, refresh_tests, register, total_scores
from . import doctor
from .cluster import grade
from .plan import plan
from .progress import Progress, notable_lines
from .worker import grade_locally, sandbox_settings


def check_sandbox(course: Path, app, accept, stream=sys.stderr) -> None:
    """Say which layers of the kernels' sandbox hold on this host; stop (:class:`.SandboxUnavailable`) where a required one is missing
    and not among ``accept`` (:func:`.doctor.refused`)."""
    settings = sandbox_settings(course, app)
    report = doctor.probe(settings, str(course / "nbgrader_config.py"))
    line, missing = doctor.summary(report, settings)
    stream.write(line + "\n")
    for warning in missing:
        stream.write(f"WARNING: {warning}\n")
    refused = doctor.refused(report, settings, set(accept))
    if refused:
        raise SandboxUnavailable(f"Not grading: the sandbox lacks {', '.join(refused)} on this host (see the warnings above "
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
    course = course.resolve()
    with Writer(course):  # the grading service and this run take turns to write the gradebook
        return _run(course, assignments, workers, force, db_url, stream, scheduler, accept)


def _run(course: Path, assignments, workers, force, db_url, stream, scheduler, accept) -> dict:
    assignments = assignments or available(course)
    unknown = [a for a in assignments if not trust.plain_id(a) or not (course / "source" / a).is_dir()]
    if unknown:
        raise UsageError(f"no such assignment in {course / 'source'}: {', '.join(unknown)}")
    db_url = db_url or gradebook_url(course)
    os.chdir(course)

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
        stream.write(f"{what} on the Dask cluster at {scheduler}\n")
        results = grade(course, db_url, todo, scheduler, set(accept))
    else:
        workers = max(1, min(workers or os.cpu_count() or 1, len(todo)))
        summary["workers"] = workers
        stream.write(f"{what} with {workers} worker(s)\n")
        results = grade_locally(course, db_url, todo, workers)
    before = {a: total_scores(db_url, course_id, a) for a in sorted({j.assignment for j in todo})}
    cells_before = regrade.snapshot(db_url, course_id, before)
    progress = Progress(len(todo), stream)
    progress.show()
    start = time.monotonic()
    for job, result in results:
        label = f"{job.assignment}/{job.student}"
        cause = None if result.success else result.cause()
        for line in notable_lines(result.log):
            if cause is None or cause not in line:  # a failure's own traceback is its NOT GRADED line
                progress.note(f"{label}: {line}")
        if result.success:
            summary["graded"] += 1
            mark = course / "autograded" / job.student / job.assignment / FINGERPRINT
            if mark.parent.is_dir():
                mark.write_text(job.fingerprint + "\n")
        else:
            progress.note(f"{label}: NOT GRADED: {cause}")
            summary["failed"].append(label)
        where = f", {result.worker}" if result.worker else ""
        progress.advance(f"{label} ({result.seconds:.1f} s{where})")
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


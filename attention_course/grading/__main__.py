"""Course commands: ``python -m attention_course.grading autograde|table|report|similarity|solutions-html|doctor``.

``autograde`` grades every submission (or those of the given assignments) across worker
           processes, with a progress line; unchanged, already graded submissions are skipped.
``table``  prints the per-student, per-assignment score table from the gradebook
           and saves it as CSV.
``report`` writes score histograms and the pass rate of every check (PNG and HTML).
``similarity`` ranks the pairs of hand-ins of an assignment by how much of their own code they share
           (report/similarity/<id>.json and .html).
``solutions-html`` renders the executed solutions (``make solutions``) as pages to post after the deadline.
``serve``  grades each hand-in as it comes and releases its feedback to the student (``c.OnSubmit``); ``serve
           --reload`` has the running service read its settings now.
``doctor`` shows which layers of the kernels' sandbox hold on this host, and how to add a missing one.
``student-bundle`` writes what students get (the released assignments, the student package, pins, Validate
           settings) as a folder and a zip in bundle/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .course import ROOT, available, gradebook_url
from .deploy.bundle import write_bundle
from .errors import CourseError
from .nbgrader_glue import patches
from .nbgrader_glue.solutions import write_pages
from .nbgrader_glue.term import course_term
from .run.autograde import run
from .run.doctor import main as doctor_main
from .run.report import write_report
from .run.tables import MISSING, Provisional, canvas_table, printable, score_table, write_csv
from .run.worker import sandbox_settings
from .service.main import ask_reload
from .service.main import main as serve_main
from .similarity.report import THRESHOLD, handed_in
from .similarity.report import main as similarity_main


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m attention_course.grading", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", type=Path, default=ROOT, help="course folder (default: this repository)")
    sub = parser.add_subparsers(dest="command", required=True)
    grade = sub.add_parser("autograde", help="autograde every submission in parallel, skipping unchanged ones")
    grade.add_argument("assignments", nargs="*", help="assignment ids (default: every assignment)")
    grade.add_argument("-j", "--workers", type=int, default=None,
                       help="grading processes (default: the number of CPU cores)")
    grade.add_argument("--force", action="store_true", help="grade again even what is graded and unchanged")
    grade.add_argument("--db", default=None, help="gradebook URL (default: sqlite:///<course>/gradebook.db)")
    grade.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="grade on the workers of this Dask scheduler (tcp://host:8786) instead of local processes")
    grade.add_argument("--accept-missing", default="", metavar="LAYER[,LAYER]",
                       help="grade even though these layers of the kernels' sandbox are missing on this host (or a "
                            "Dask worker); without it a missing layer stops the run (`make doctor` lists them)")
    table = sub.add_parser("table", help="print and save the grade table")
    table.add_argument("--csv", type=Path, default=Path("grades.csv"), help="where to save it (default: grades.csv)")
    table.add_argument("--canvas", type=Path, default=Path("grades-canvas.csv"),
                       help="where to save the scores for Canvas's gradebook import (default: grades-canvas.csv)")
    table.add_argument("--db", default=None, help="gradebook URL (default: sqlite:///<course>/gradebook.db)")
    table.add_argument("--provisional", action="store_true",
                       help="export to Canvas even scores with answers still to grade by hand (refused without it)")
    table.add_argument("--missing", choices=("zero", "blank"), default="zero",
                       help="a hand-in that never came, after the student's deadline (extension included), in the "
                            "Canvas export: 0 (default, the usual LMS convention) or blank (Canvas leaves it unchanged)")
    report = sub.add_parser("report", help="write score histograms and per-check pass rates")
    report.add_argument("--out", type=Path, default=Path("report"), help="output folder (default: report/)")
    report.add_argument("--db", default=None, help="gradebook URL (default: sqlite:///<course>/gradebook.db)")
    similar = sub.add_parser("similarity", help="rank the pairs of hand-ins of an assignment by shared code")
    similar.add_argument("assignments", nargs="*", help="assignment ids (default: every assignment with hand-ins)")
    similar.add_argument("--threshold", type=float, default=None, help="flag pairs scoring at least this (0 to 1)")
    similar.add_argument("--common", type=int, default=None, metavar="N",
                         help="leave out code found in more than N hand-ins (default: max(10, 10%% of the class)); "
                              "raise it to catch a solution many students copied from one source")
    pages = sub.add_parser("solutions-html", help="render solutions/<id>/*.ipynb as solutions/<id>/*.html")
    pages.add_argument("assignments", nargs="*", help="assignment ids (default: every assignment)")
    serve = sub.add_parser("serve", help="grade each hand-in as it comes and release its feedback (c.OnSubmit)")
    serve.add_argument("-j", "--workers", type=int, default=None,
                       help="local grading processes (default: the number of CPU cores)")
    serve.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="grade on the workers of this Dask scheduler instead of local processes")
    serve.add_argument("--accept-missing", default="", metavar="LAYER[,LAYER]",
                       help="grade even though these layers of the kernels' sandbox are missing (as autograde)")
    serve.add_argument("--once", action="store_true", help="stop when nothing waits to be graded")
    serve.add_argument("--reload", action="store_true",
                       help="ask the course's running service to read nbgrader_config.py and extensions.csv now, and "
                            "print its answer (make serve-reload)")
    sub.add_parser("doctor", help="which layers of the kernels' sandbox hold on this host")
    bundle = sub.add_parser("student-bundle", help="what students get, as bundle/<name>/ and bundle/<name>.zip")
    bundle.add_argument("--out", type=Path, default=None, help="output folder (default: <course>/bundle)")
    bundle.add_argument("--assignments", nargs="+", default=None,
                        help="the assignments students get ('all' for every one; default: those released to the exchange)")
    return parser


def accepted(args) -> set[str]:
    return {name.strip() for name in args.accept_missing.split(",") if name.strip()}


def student_bundle(args, course: Path) -> int:
    archive = write_bundle(course, args.out, args.assignments)
    print(f"Wrote {archive.with_suffix('')}/ and {archive}: give students either (its README.md says how to "
          "install and start)")
    return 0


def doctor(args, course: Path) -> int:
    return doctor_main(sandbox_settings(course), str(course / "nbgrader_config.py"))


def serve(args, course: Path) -> int:
    if args.reload:
        return ask_reload(course)
    return serve_main(course, args.workers, args.scheduler, accepted(args), args.once)


def autograde(args, course: Path) -> int:
    summary = run(course, args.assignments, args.workers, args.force, args.db, scheduler=args.scheduler,
                  accept=accepted(args))
    return 1 if summary["failed"] else 0


def similarity(args, course: Path) -> int:
    known = available(course)
    # an id, or its number (A=1, A=01) or any unique beginning of it
    chosen = [next(iter(m)) if len(m := [k for k in known if k == a or k.startswith(a.zfill(2) + "_")
                                          or k.startswith(a)]) == 1 else a for a in args.assignments] \
        or [a for a in known if handed_in(course, a)]
    unknown = [a for a in chosen if a not in known]
    if unknown or not chosen:
        print(f"Unknown assignment(s): {', '.join(unknown)}; the assignments are {', '.join(known)}"
              if unknown else "No hand-ins in submitted/ yet.", file=sys.stderr)
        return 1
    threshold = THRESHOLD if args.threshold is None else args.threshold
    if not 0 < threshold <= 1:
        args.parser.error("--threshold must be in (0, 1]")
    if args.common is not None and args.common < 1:
        args.parser.error("--common must be at least 1")
    return similarity_main(course, chosen, threshold, args.common)


def solutions_html(args, course: Path) -> int:
    written = write_pages(course, args.assignments or available(course))
    if not written:
        print("No executed solutions in solutions/: run `make solutions` first.", file=sys.stderr)
        return 1
    print("\n".join(f"Wrote {page}" for page in written))
    return 0


def report(args, course: Path) -> int:
    out = args.out if args.out.is_absolute() else course / args.out
    term = course_term(course)
    term.check()
    print(f"Wrote {write_report(args.db or gradebook_url(course), available(course), out, term, course)}")
    return 0


def table(args, course: Path) -> int:
    db = args.db or gradebook_url(course)
    term = course_term(course)
    term.check()
    marks: dict = {}
    header, rows = score_table(db, available(course), course, marks=marks, term=term)
    if not rows:
        print("The gradebook has no students yet: run `make autograde` first.", file=sys.stderr)
        return 1
    print(printable(header, rows, marks))
    csv_path = args.csv if args.csv.is_absolute() else course / args.csv
    write_csv(csv_path, header, rows)
    canvas_path = args.canvas if args.canvas.is_absolute() else course / args.canvas
    try:
        write_csv(canvas_path, *canvas_table(db, available(course), course, args.provisional, term,
                                             missing_zero=args.missing == "zero"))
    except Provisional as waiting:
        canvas_path.unlink(missing_ok=True)  # an older export must not pass for this one
        shown = ", ".join(waiting.waiting[:8]) + (f" and {len(waiting.waiting) - 8} more" if len(waiting.waiting) > 8
                                                  else "")
        print(f"\nSaved {csv_path}. Not saved: {canvas_path.name}: {waiting} ({shown}); Canvas would show them "
              "as final grades. Grade those answers in the Formgrader, or export them as they are with "
              "`make grades PROVISIONAL=1` (--provisional).")
        return 0
    said = " (provisional scores included, as asked: answers still wait for grading by hand)" \
        if args.provisional and any("*" in m for m in marks.values()) else ""
    missing = sum(row.count(MISSING) for row in rows)
    if missing:
        said += (f"; {missing} missing hand-in(s) exported as 0 (`make grades MISSING=blank`, --missing blank, "
                 "leaves them blank)" if args.missing == "zero" else
                 f"; {missing} missing hand-in(s) left blank, as asked")
    print(f"\nSaved {csv_path} and {canvas_path} (for Canvas: Grades > Import){said}")
    return 0


#: Each command and the function that runs it.
COMMANDS = {"autograde": autograde, "table": table, "report": report, "similarity": similarity,
            "solutions-html": solutions_html, "serve": serve, "doctor": doctor, "student-bundle": student_bundle}


def main(argv=None) -> int:
    """Run one command; a problem of the course's set-up (:class:`.errors.CourseError`) is printed, not a traceback."""
    commands = parser()
    args = commands.parse_args(argv)
    args.parser = commands
    try:
        patches.install()  # the course's changes to nbgrader, before any of nbgrader runs here
        return COMMANDS[args.command](args, args.course.resolve())
    except CourseError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())

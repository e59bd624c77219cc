"""``make bench``: how fast a class of ``01_self_attention`` is graded, against stock nbgrader.

One synthetic class (``--students``, default 40: the catalogue's complete, blank, mistaken and
alternative answers, round robin) is released and handed in once, then graded by
1. stock ``nbgrader autograde`` with nbgrader's own pipeline (a new kernel and a fresh
   ``import torch`` per notebook, tests in the student's kernel), one submission after another,
   with nbgrader's ``IgnorePattern`` set so that warnings on stderr do not fail a cell;
2. ``nbgrader autograde`` with this course's configuration but a new Python per kernel (the
   judged, sandboxed pipeline as it was before the fork server);
3. ``nbgrader autograde`` with this course's configuration (kernels forked from a process that
   has imported the libraries), still one process;
4. the course command (``make autograde``) with ``--workers`` processes.
Then a mixed class (every assignment) on 1, 2 and 2 Dask workers, and a CPU hog beside a class of 8
(:mod:`.bench_hog`: exit status 1 when it slows its classmates by more than 25%).
It prints wall-clock seconds per submission (start-up included), the speed-up over stock, the
floor (the notebooks' own execution time with every import done: each graded notebook run in one
warm IPython shell, tests included, figures rendered to PNG as a kernel does), and compares
per-cell grades: all four runs must agree exactly. Exit status 1 when they do not or the course
command is less than ``--target`` times faster than stock.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attention_course.grading.course import catalogue_path, gradebook_url, scratch_course
from attention_course.grading.run.tables import cell_scores

from .loopback import LoopbackCluster
from .submissions import BLANK, COMPLETE, load_catalogue, write_class

ASSIGNMENT = "01_self_attention"
STOCK_CONFIG = r'''# Stock nbgrader: its default release and autograde pipelines.
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "attention-from-scratch"
# nbgrader fails any cell that prints to stderr; its own IgnorePattern drops warnings first,
# so that correct answers which trigger a PyTorch or NumPy warning keep their points.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"\w+Warning: "
'''

FLOOR = r"""
import io, json, os, sys, time, warnings
os.environ["NBGRADER_EXECUTION"] = "autograde"
import numpy, torch, matplotlib
matplotlib.use("module://matplotlib_inline.backend_inline")
import matplotlib.pyplot
from IPython.core.interactiveshell import InteractiveShell
from matplotlib_inline.backend_inline import configure_inline_support
import nbformat
warnings.simplefilter("ignore")
shell = InteractiveShell.instance()
# A kernel's inline backend: display(fig) (the course's show()) renders the PNG there, as it does in a kernel;
# a plain shell would print the figure's repr instead.
configure_inline_support(shell, "module://matplotlib_inline.backend_inline")
notebooks = sys.argv[1:]
seconds = {}
for path in notebooks:
    start = time.perf_counter()
    nb = nbformat.read(path, as_version=4)
    shell.reset(new_session=False)
    os.chdir(os.path.dirname(path))
    for cell in nb.cells:
        if cell.cell_type == "code":
            shell.run_cell(cell.source, silent=True)
            for num in matplotlib.pyplot.get_fignums():  # what a kernel's inline backend does after a cell
                matplotlib.pyplot.figure(num).savefig(io.BytesIO(), format="png", bbox_inches="tight")
            matplotlib.pyplot.close("all")
    seconds[path] = time.perf_counter() - start
print(json.dumps(seconds))
"""


ROSTER_NAMES: dict[str, str] = {}


def roster(n: int, assignment: str = ASSIGNMENT) -> dict:
    """``n`` students cycling through the catalogue (complete, blank, every mistake and alternative)."""
    answers = [COMPLETE, BLANK, *load_catalogue(catalogue_path(assignment))]
    chosen = {f"student{i + 1:03d}": what for i, what in zip(range(n), itertools.cycle(answers))}
    ROSTER_NAMES.update({s: getattr(w, "name", w) for s, w in chosen.items()})
    return chosen


def _env() -> dict:
    bindir = os.path.dirname(sys.executable)
    return dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")


def _timed(cmd: list[str], cwd: Path) -> float:
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return seconds


def _course_command(course: Path, *args: str) -> list[str]:
    """``make autograde``'s command line on ``course`` (``args``: the autograde options)."""
    return [sys.executable, "-m", "attention_course.grading", "--course", str(course), "autograde", *args]


def _nbgrader(*args: str) -> list[str]:
    return [os.path.join(os.path.dirname(sys.executable), "nbgrader"), *args, "--log-level=ERROR"]


def _grades(course: Path, assignment: str = ASSIGNMENT) -> dict:
    return {student: {cell: score for cell, (score, _, _) in cells.items()}
            for student, cells in cell_scores(gradebook_url(course), assignment).items()}


def _class_grades(course: Path, assignments: list[str]) -> dict:
    """Per-cell scores of every hand-in, by ``assignment/student``."""
    return {f"{a}/{student}": cells for a in assignments for student, cells in _grades(course, a).items()}


#: Where stock nbgrader and the course grade one cell differently by a rule the course states (README, docs).
STOCK_RULES = {
    "judged": "tests run in the grader's judge, outside the student's kernel, and call the student's functions with "
              "the notebook's variables out of reach: a mistake hidden from tests in the kernel (a notebook variable "
              "read instead of an argument, a test's name shadowed) loses the cells its catalogue entry names, where "
              "stock gives them points",
    "in place": "an argument changed in place is a note on the check, not a lost point: only the student's kernel "
                "knows of it (README, Not defended; stock's tests, in that kernel, fail the cell)",
}


def stock_differs_by_rule(entry, cell: str, stock, ours) -> str | None:
    """The rule of :data:`STOCK_RULES` by which stock nbgrader's score of a catalogue entry's cell may differ from
    the course's, or None: any other difference fails the bench."""
    if entry is None or not hasattr(entry, "loses") or stock is None or ours is None:
        return None
    if cell in entry.loses and stock > ours:
        return STOCK_RULES["judged"]
    if entry.noted and stock < ours:
        return STOCK_RULES["in place"]
    return None


def _differences(got: dict, want: dict) -> list[tuple[str, str]]:
    """(student, grade cell) pairs whose score differs."""
    return [(student, cell) for student in sorted(set(got) | set(want))
            for cell in sorted(set(got.get(student, {})) | set(want.get(student, {})))
            if got.get(student, {}).get(cell) != want.get(student, {}).get(cell)]


def _stderr_cells(course: Path, student: str) -> set[str]:
    """Grade cells of a graded notebook with output on stderr (stock nbgrader fails such a cell)."""
    found = set()
    for path in (course / "autograded" / student / ASSIGNMENT).glob("*.ipynb"):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in cell.get("outputs", [])):
                found.add(cell["metadata"].get("nbgrader", {}).get("grade_id"))
    return found


def _floor(course: Path, cwd: Path) -> dict[str, float]:
    """Seconds each graded notebook of ``course`` takes in one warm IPython shell, by its path."""
    notebooks = sorted(str(p) for p in (course / "autograded").glob("*/*/*.ipynb"))
    proc = subprocess.run([sys.executable, "-c", FLOOR, *notebooks], env=_env(), capture_output=True, text=True,
                          cwd=cwd)
    if proc.returncode != 0:
        raise SystemExit(f"floor measurement failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=40, help="class size (default: 40)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="workers of the course command (default: the number of CPU cores)")
    parser.add_argument("--target", type=float, default=4.0, help="required speed-up over stock (default: 4)")
    parser.add_argument("--class-size", type=int, default=20,
                        help="students of the mixed class, each handing in every assignment (default: 20; 0: skip)")
    parser.add_argument("--hog-class", type=int, default=8,
                        help="classmates graded beside a CPU hog (default: 8; 0: skip; tools/bench_hog.py)")
    parser.add_argument("--hog-workers", type=int, default=2, help="workers grading them (default: 2)")
    parser.add_argument("--hog-seconds", type=float, default=40, help="how long the hog burns (default: 40)")
    parser.add_argument("--hog-limit", type=float, default=0.25,
                        help="the most the classmates' median may slow down (default: 0.25)")
    parser.add_argument("--hog-variants", nargs="+", default=["setsid", "threads", "busy"],
                        choices=["setsid", "threads", "busy"], help="the hostile hand-ins (default: all three)")
    parser.add_argument("--only-hog", action="store_true", help="run the CPU-hog part alone")
    parser.add_argument("--keep", action="store_true", help="keep the scratch courses")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="attention-bench-"))
    try:
        status = 0 if args.only_hog else _bench(scratch, args)
        if args.class_size and not args.only_hog:
            print()
            status = max(status, _mixed(scratch, args))
        if args.hog_class:
            from .bench_hog import main as hog_main

            print()
            status = max(status, hog_main(scratch, args))
        return status
    finally:
        if args.keep:
            print(f"Scratch courses kept in {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def _bench(scratch: Path, args) -> int:
    n = args.students
    print(f"Benchmark: {n} submissions of {ASSIGNMENT} on {os.cpu_count()} CPU core(s)")
    course = scratch_course(scratch / "ours", [ASSIGNMENT])
    _timed(_nbgrader("generate_assignment", ASSIGNMENT, "--force"), course)
    write_class(course, ASSIGNMENT, roster(n))
    stock = scratch / "stock" / "course"
    shutil.copytree(course, stock)
    (stock / "nbgrader_config.py").write_text(STOCK_CONFIG)

    runs = [
        ("stock nbgrader autograde, sequential", stock, _nbgrader("autograde", ASSIGNMENT, "--force")),
        ("nbgrader autograde, course config, a new Python per kernel", course,
         _nbgrader("autograde", ASSIGNMENT, "--force", "--JudgedExecute.fork=False")),
        ("nbgrader autograde, course config (fork server)", course, _nbgrader("autograde", ASSIGNMENT, "--force")),
        (f"course command (make autograde), {args.workers} workers", course,
         _course_command(course, ASSIGNMENT, "--force", "--workers", str(args.workers))),
    ]
    rows, grades = [], []
    for i, (name, folder, cmd) in enumerate(runs, 1):
        print(f"  {i}. {name} ...", flush=True)
        rows.append((name, _timed(cmd, folder)))
        grades.append(_grades(folder))
    t_stock, t_par = rows[0][1], rows[-1][1]

    print("  5. floor: the graded notebooks run in one warm IPython shell ...", flush=True)
    floor = sum(_floor(course, scratch).values()) / n
    cores = min(args.workers, os.cpu_count() or 1)

    print()
    width = max(len(name) for name, _ in rows)
    print(f"{'':{width}}  {'total s':>8}  {'s/submission':>12}  {'vs stock':>8}")
    for name, seconds in rows:
        print(f"{name:{width}}  {seconds:8.1f}  {seconds / n:12.3f}  {t_stock / seconds:7.1f}x")
    print(f"{'floor: execution only, imports done':{width}}  {floor * n:8.1f}  {floor:12.3f}  "
          f"{t_stock / n / floor:7.1f}x")
    print()
    ratio = t_stock / t_par
    print(f"Course command: {ratio:.1f}x faster than stock nbgrader (target {args.target:g}x), "
          f"{rows[1][1] / t_par:.1f}x faster than the course's pipeline with a new Python per kernel; "
          f"{t_par / n / floor:.1f}x the one-core floor, {t_par / n / (floor / cores):.1f}x the floor spread "
          f"over {cores} core(s) ({floor / cores:.3f} s/submission).")
    ours = grades[-1]
    differ = [(i, student, cell) for i, g in enumerate(grades[:-1], 1) for student, cell in _differences(g, ours)]
    catalogue = {s.name: s for s in load_catalogue(catalogue_path(ASSIGNMENT))}
    ruled = {}  # the differences the course's stated rules make, each with its rule
    for i, student, cell in differ:
        rule = i == 1 and stock_differs_by_rule(catalogue.get(ROSTER_NAMES.get(student)), cell,
                                                grades[0].get(student, {}).get(cell), ours.get(student, {}).get(cell))
        if rule:
            ruled.setdefault(rule, []).append((student, cell))
    differ = [d for d in differ if not (d[0] == 1 and (d[1], d[2]) in {x for v in ruled.values() for x in v})]
    print("Per-cell grades identical in all four runs: " + ("yes" if not differ else "NO")
          + (", but where a rule of the course makes stock nbgrader differ:" if ruled else ""))
    for rule, cells in ruled.items():
        print(f"  {len(cells)} cell(s) by the rule: {rule} ("
              + ", ".join(f"{s} {ROSTER_NAMES.get(s)} {c}" for s, c in cells[:6]) + (", ..." if len(cells) > 6 else "") + ")")
    for i, student, cell in differ[:40]:
        stderr = i == 1 and cell in _stderr_cells(stock, student)
        hint = " (stock nbgrader fails a cell with output on stderr)" if stderr else ""
        print(f"  run {i}: {student} ({ROSTER_NAMES.get(student)}) {cell}: "
              f"{grades[i - 1].get(student, {}).get(cell)}, course command {ours.get(student, {}).get(cell)}{hint}")
    identical = not differ
    return 0 if identical and ratio >= args.target else 1


def _mixed(scratch: Path, args) -> int:
    """A class handing in every assignment, graded by 1 and 2 local workers and by 2 Dask workers."""
    from attention_course.grading.course import available

    assignments = [a for a in available() if catalogue_path(a).exists()]
    n, cores = args.class_size, os.cpu_count() or 1
    total = n * len(assignments)
    print(f"Mixed class: {n} students x {len(assignments)} assignments = {total} hand-ins on {cores} CPU core(s)")
    course = scratch_course(scratch / "mixed", assignments)
    for assignment in assignments:
        _timed(_nbgrader("generate_assignment", assignment, "--force"), course)
        write_class(course, assignment, roster(n, assignment))
    command = _course_command(course, "--force")
    runs = [("course command, 1 worker", command + ["--workers", "1"]),
            ("course command, 2 workers", command + ["--workers", "2"]),
            ("course command, 2 Dask workers (loopback)", None)]
    rows, grades = [], []
    for i, (name, cmd) in enumerate(runs, 1):
        print(f"  {i}. {name} ...", flush=True)
        if cmd is None:  # the scheduler and workers start before the clock does, as a standing cluster would
            with LoopbackCluster(scratch / "cluster", workers=2) as cluster:
                rows.append((name, _timed(command + ["--scheduler", cluster.address], course)))
        else:
            rows.append((name, _timed(cmd, course)))
        grades.append(_class_grades(course, assignments))
    print(f"  {len(runs) + 1}. floor: the graded notebooks run in one warm IPython shell ...", flush=True)
    per_notebook = _floor(course, scratch)
    floor = sum(per_notebook.values())

    print()
    print("Floor per assignment (one warm shell, one core): " + ", ".join(
        f"{a} {sum(t for p, t in per_notebook.items() if f'/{a}/' in p) / n:.2f} s" for a in assignments))
    width = max(len(name) for name, _ in rows)
    one = rows[0][1]
    print(f"{'':{width}}  {'total s':>8}  {'s/hand-in':>9}  {'vs 1 worker':>11}  {'x floor':>7}  {'x floor/2':>9}")
    print(f"{'floor: execution only, imports done':{width}}  {floor:8.1f}  {floor / total:9.3f}")
    for name, seconds in rows:
        print(f"{name:{width}}  {seconds:8.1f}  {seconds / total:9.3f}  {one / seconds:10.2f}x  "
              f"{seconds / floor:6.2f}x  {seconds / (floor / 2):8.2f}x")
    print(f"2 Dask workers took {rows[2][1] / rows[1][1]:.2f}x the time of 2 local workers.")
    differ = [(runs[i][0], key, cell) for i, g in enumerate(grades[:-1]) for key, cell in _differences(g, grades[-1])]
    print("Per-cell grades identical in all three runs: " + ("yes" if not differ else "NO"))
    for name, key, cell in differ[:40]:
        print(f"  {name}: {key} {cell}")
    return 1 if differ else 0


def class_main(argv=None) -> int:
    """``make bench-class``: a large class of 01 graded by the course command, seconds per block as it goes."""
    import re

    parser = argparse.ArgumentParser(prog="python -m tools bench-class",
                                     description="Grade N synthetic hand-ins of 01 with the course command and "
                                                 "print the seconds each block of hand-ins took, as it goes: does "
                                                 "the cost per hand-in stay flat as the gradebook grows?")
    parser.add_argument("--students", type=int, default=500, help="hand-ins (default: 500)")
    parser.add_argument("--every", type=int, default=100, help="block size (default: 100)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="default: the number of CPU cores")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="attention-bench-class-"))
    try:
        course = scratch_course(scratch / "class", [ASSIGNMENT])
        _timed(_nbgrader("generate_assignment", ASSIGNMENT, "--force"), course)
        write_class(course, ASSIGNMENT, roster(args.students))
        print(f"{args.students} hand-ins of {ASSIGNMENT}, {args.workers} workers, {os.cpu_count()} CPU core(s); "
              f"the first block includes the workers' start-up", flush=True)
        proc = subprocess.Popen(_course_command(course, ASSIGNMENT, "--force", "--workers", str(args.workers)),
                                cwd=course, env=_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        start = last = time.monotonic()
        blocks, tail = [], []
        for line in proc.stderr:
            tail = (tail + [line])[-40:]
            done = re.match(r"\[[#.]+\] (\d+)/(\d+)", line)
            if not done or (int(done.group(1)) % args.every and int(done.group(1)) != args.students):
                continue
            now, count = time.monotonic(), int(done.group(1))
            size = (course / "gradebook.db").stat().st_size
            first = len(blocks) * args.every + 1
            blocks.append((now - last) * 100 / (count - first + 1))
            print(f"  hand-ins {first:4d}-{count:4d}: {now - last:6.1f} s, {blocks[-1]:5.1f} s per 100; "
                  f"gradebook {size / 2**20:5.1f} MB; elapsed {now - start:6.0f} s", flush=True)
            last = now
        if proc.wait() != 0:
            print("".join(tail), file=sys.stderr)
            return 1
        steady = blocks[1:] or blocks
        print(f"Seconds per 100 after the first block: {min(steady):.1f} to {max(steady):.1f} "
              f"(last / second block: {steady[-1] / steady[0]:.2f})")
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

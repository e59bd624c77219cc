"""``make bench``'s CPU-hog part: does a hostile hand-in slow its classmates down?

A class of ``--hog-class`` (default 8) honest hand-ins of ``01_self_attention`` (the catalogue's complete, blank and
mistaken answers) is graded by the course command on ``--hog-workers`` (default 2) workers, then the same class
beside one hostile hand-in, a complete answer with one cell more after the setup cell, in each of its variants:

* ``setsid``: the red team's, 48 children that each call ``setsid()`` and burn the CPU;
* ``threads``: 48 threads of the kernel hashing outside the GIL;
* ``busy``: a busy loop in the kernel's own process.

The hostile cell burns for ``--hog-seconds`` (default 40; under the 60 s cell limit, so that the run stays short)
and waits for its children; its student id sorts first, so that one worker grades it while the other grades the
whole class beside it. Printed: each classmate's grading time (the course command's per-hand-in seconds), median and
max, with and without the hog, and the median without each worker's first hand-in (warm). Exit status 1 when the
classmates' median (either) slows by more than ``--hog-limit`` (25%), when a classmate's grades change, when the hog
is not graded, or when the hog stopped burning before the last classmate was graded (the measurement would not cover
the class). Where this host delegates a cpu cgroup the whole comparison runs twice: with cgroups (a quota per
kernel) and without (``c.JudgedExecute.cgroups = False``: a session's share).
"""

from __future__ import annotations

import copy
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from attention_course.grading.course import scratch_course
from attention_course.grading.kernels import cgroups

from .submissions import Submission, write_class

ASSIGNMENT, NOTEBOOK, HOG = "01_self_attention", "self_attention.ipynb", "a-hog"
SETSID = """
import os, time
end, children = time.time() + {seconds}, []
for _ in range(48):
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
        except OSError:
            pass
        while time.time() < end:
            pass
        os._exit(0)
    children.append(pid)
for pid in children:
    os.waitpid(pid, 0)
"""
THREADS = """
import hashlib, threading, time
end, block = time.time() + {seconds}, b"x" * 2**20
def burn():
    while time.time() < end:
        hashlib.sha256(block).digest()
threads = [threading.Thread(target=burn) for _ in range(48)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
"""
BUSY = """
import time
end = time.time() + {seconds}
while time.time() < end:
    pass
"""
VARIANTS = {"setsid": ("48 busy children, each calling setsid()", SETSID),
            "threads": ("48 threads hashing outside the GIL", THREADS),
            "busy": ("a busy loop in the kernel's own process", BUSY)}


def hostile(variant: str, seconds: float) -> Submission:
    """The complete answer with the variant's cell after the setup cell."""
    description, code = VARIANTS[variant]

    def transform(notebooks):
        notebooks = copy.deepcopy(notebooks)
        cells = notebooks[NOTEBOOK]["cells"]
        at = next(i for i, c in enumerate(cells) if c["metadata"].get("nbgrader", {}).get("grade_id") == "setup")
        cells.insert(at + 1, {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                              "source": code.format(seconds=seconds).strip("\n")})
        return notebooks

    return Submission(f"hog-{variant}", description, transform=transform)


_DONE = re.compile(r"\s(\S+)/(\S+) \((\d+(?:\.\d+)?) s[,)]")


def grade(course: Path, workers: int, env: dict, course_command) -> dict:
    """Grade every hand-in of ``course``: ``{student: (seconds grading it took, seconds since the run began when it
    was done)}``, and ``"not graded"``: the students not graded."""
    proc = subprocess.Popen(course_command(course, ASSIGNMENT, "--force", "--workers", str(workers)), cwd=course,
                            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    start, times, failed, tail = time.monotonic(), {}, [], []
    for line in proc.stderr:
        tail = (tail + [line])[-40:]
        if "NOT GRADED" in line:
            failed.append(line.split(":", 1)[0].rsplit("/", 1)[-1].strip())
        done = _DONE.search(line)
        if done and done.group(1) == ASSIGNMENT:
            times[done.group(2)] = (float(done.group(3)), time.monotonic() - start)
    if proc.wait() != 0 and not failed:
        raise SystemExit("the course command failed:\n" + "".join(tail))
    return {**times, "not graded": failed}


def main(scratch: Path, args) -> int:
    """The hog part of ``make bench`` (see the module), in ``scratch``; ``args``: :mod:`.bench`'s options."""
    from .bench import _course_command as course_command
    from .bench import _env, roster
    from .bench import _grades as grades

    env, n, workers = _env(), args.hog_class, args.hog_workers
    print(f"A CPU hog beside a class: {n} hand-ins of {ASSIGNMENT} on {workers} workers, with and without one hostile "
          f"hand-in, a complete answer whose extra cell burns for {args.hog_seconds:g} s: "
          + "; ".join(f"{v}: {VARIANTS[v][0]}" for v in args.hog_variants))
    course = scratch_course(scratch / "hog", [ASSIGNMENT])
    subprocess.run([str(Path(sys.executable).parent / "nbgrader"), "generate_assignment", ASSIGNMENT, "--force",
                    "--log-level=ERROR"], cwd=course, env=env, check=True, capture_output=True)
    classmates = write_class(course, ASSIGNMENT, roster(n))
    passes = [("with cgroups (a cpu quota per kernel)", "")] if "cpu" in cgroups.layout().places else []
    passes.append(("without cgroups (a session's share)", "\nc.JudgedExecute.cgroups = False\n"))
    config = (course / "nbgrader_config.py").read_text()
    status = 0
    for title, extra in passes:
        (course / "nbgrader_config.py").write_text(config + extra)
        rows = []
        for variant in [None, *args.hog_variants]:
            for folder in (course / "submitted" / HOG, course / "autograded" / HOG):
                shutil.rmtree(folder, ignore_errors=True)
            if variant:
                write_class(course, ASSIGNMENT, {HOG: hostile(variant, args.hog_seconds)})
            print(f"  {title}: {f'beside the hog ({variant})' if variant else 'the class alone'} ...", flush=True)
            got = grade(course, workers, env, course_command)
            rows.append((variant, got, grades(course)))
        status = max(status, _report(title, rows, classmates, args))
    return status


def _medians(got: dict, classmates: list[str]) -> tuple[float, float]:
    """The classmates' median grading time, and the same without each worker's first hand-in (those whose grading
    began before any hand-in of the run was done)."""
    first_done = min(value[1] for student, value in got.items() if student != "not graded")
    times = {s: got[s] for s in classmates if s in got}
    warm = [seconds for seconds, done in times.values() if done - seconds >= first_done] or \
        [seconds for seconds, _ in times.values()]
    return statistics.median(seconds for seconds, _ in times.values()), statistics.median(warm)


def _report(title: str, rows: list, classmates: list[str], args) -> int:
    from .bench import _differences

    (_, base, base_grades) = rows[0]
    print(f"\n  {title}: the {len(classmates)} classmates' grading time, s per hand-in (warm: without each worker's "
          "first, which also waits for the worker's first kernel)")
    print(f"    {'':24}  {'median':>6}  {'max':>6}  {'slower':>6}  {'warm':>5}  {'slower':>6}  "
          "the hog: graded in, scored")
    median, warm = _medians(base, classmates)
    print(f"    {'the class alone':24}  {median:6.2f}  {max(base[s][0] for s in classmates if s in base):6.2f}  "
          f"{'':6}  {warm:5.2f}")
    complete = sum(v or 0 for v in base_grades.get(classmates[0], {}).values())  # the roster's first: complete
    status = 0
    for variant, got, got_grades in rows[1:]:
        mine = [got[s][0] for s in classmates if s in got]
        if not mine:
            print(f"    beside the hog ({variant}): FAILS: no classmate was graded")
            status = 1
            continue
        got_median, got_warm = _medians(got, classmates)
        slower = got_median / median - 1
        start = lambda s: got[s][1] - got[s][0]  # noqa: E731  (seconds into the run its grading began)
        hog_seconds, hog_done = got.get(HOG, (0.0, 0.0))
        hog_start = hog_done - hog_seconds  # it burns from its first cells on, for hog_seconds
        covered = hog_start <= min(start(s) for s in classmates if s in got) + 5 and \
            max(got[s][1] for s in classmates if s in got) <= hog_start + args.hog_seconds
        wrong = [f"{s} {c}" for s, c in _differences(got_grades, base_grades) if s != HOG]
        problems = ([f"{len(classmates) - len(mine)} classmate(s) not graded"] if len(mine) < len(classmates) else []) \
            + (["the hog was not graded"] if HOG not in got or HOG in got["not graded"] else []) \
            + ([f"grades changed: {', '.join(wrong[:6])}"] if wrong else []) \
            + ([] if covered else ["the hog stopped burning before the last classmate was graded"]) \
            + ([f"more than {args.hog_limit:.0%} slower"] if max(slower, got_warm / warm - 1) > args.hog_limit else [])
        scored = sum(v or 0 for v in got_grades.get(HOG, {}).values())
        print(f"    {f'beside the hog ({variant})':24}  {got_median:6.2f}  {max(mine):6.2f}  {slower:+6.0%}  "
              f"{got_warm:5.2f}  {got_warm / warm - 1:+6.0%}  {hog_seconds:5.1f} s, {scored:g} of the complete "
              f"answer's {complete:g}" + (f"  FAILS: {'; '.join(problems)}" if problems else ""))
        status = max(status, 1 if problems else 0)
    return status


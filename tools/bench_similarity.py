"""``make bench`` (its last part) and ``python -m tools bench-similarity``: the similarity report on a large class.

A class of ``--students`` hand-ins of ``01_self_attention`` (default 500) is written: the catalogue's answers
(complete, mistaken, alternative) round robin, each student's copy disguised with names of its own
(``submissions.disguise``), plus the untouched release. The report (``python -m attention_course.grading
similarity``) runs on a quarter, half and all of it, each in a new process; the bench prints the seconds, the peak
memory (RSS), the pairs of the class and the pairs actually compared (those sharing a fingerprint that is not
common code, found through the fingerprint index). Exit status 1 when the whole class takes longer than
``--target`` seconds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from attention_course.grading.course import ROOT

from .bench import roster
from .submissions import BLANK, COMPLETE, apply_submission, disguise, read_notebook, solved_notebook, write_notebook

ASSIGNMENT = "01_self_attention"
MEASURE = r"""
import json, resource, sys, time
from pathlib import Path
from attention_course.grading import similarity
start = time.perf_counter()
result = similarity.write(Path(sys.argv[1]), sys.argv[2])
print(json.dumps({"seconds": time.perf_counter() - start, "students": len(result.students),
                  "compared": result.compared, "flagged": sum(p["flagged"] for p in result.pairs),
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def write_students(course: Path, n: int, assignment: str = ASSIGNMENT) -> None:
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / assignment, course / part / assignment)
    masters = {p.name: read_notebook(p) for p in sorted((course / "source" / assignment).glob("*.ipynb"))}
    built = {}
    for i, what in enumerate(roster(n, assignment).values()):  # make bench's round robin over the catalogue
        key = what if isinstance(what, str) else what.name
        if key not in built:
            built[key] = ({name: read_notebook(course / "release" / assignment / name) for name in masters}
                          if what == BLANK else {name: solved_notebook(nb) for name, nb in masters.items()}
                          if what == COMPLETE else apply_submission(masters, what))
        notebooks = built[key] if what == BLANK else disguise(built[key], seed=i)
        for name, nb in notebooks.items():
            write_notebook(nb, course / "submitted" / f"student{i:04d}" / assignment / name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools bench-similarity", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=500, help="hand-ins (default: 500)")
    parser.add_argument("--target", type=float, default=60.0, help="seconds allowed for the whole class (default: 60)")
    args = parser.parse_args(argv)
    print(f"Similarity report on {args.students} hand-ins of {ASSIGNMENT} (each size in a new process)")
    print(f"{'hand-ins':>9} {'pairs':>9} {'compared':>9} {'flagged':>8} {'seconds':>8} {'peak MiB':>9}")
    figures = []
    with tempfile.TemporaryDirectory(prefix="bench-similarity-") as scratch:
        for n in sorted({max(2, args.students // 4), max(2, args.students // 2), args.students}):
            course = Path(scratch) / f"class{n}"
            write_students(course, n)
            run = subprocess.run([sys.executable, "-c", MEASURE, str(course), ASSIGNMENT], capture_output=True,
                                 text=True, cwd=ROOT)
            if run.returncode:
                print(run.stderr[-3000:], file=sys.stderr)
                return 1
            m = json.loads(run.stdout.strip().splitlines()[-1])
            figures.append((n, m))
            print(f"{m['students']:>9} {n * (n - 1) // 2:>9} {m['compared']:>9} {m['flagged']:>8} "
                  f"{m['seconds']:>8.1f} {m['rss_mib']:>9.0f}")
    (n0, m0), (n1, m1) = figures[0], figures[-1]
    print(f"From {n0} to {n1} hand-ins ({n1 / n0:.0f}x): the time grew {m1['seconds'] / m0['seconds']:.1f}x, the pairs "
          f"{n1 * (n1 - 1) / (n0 * (n0 - 1)):.0f}x, the pairs compared {m1['compared'] / max(1, m0['compared']):.1f}x.")
    return 0 if m1["seconds"] <= args.target else 1

"""``make bench`` (its last part) and ``python -m tools bench-similarity``: the similarity report on a large class.

A class of ``--students`` hand-ins of ``01_self_attention`` (default 500) is written: the catalogue's answers
(complete, mistaken, alternative) round robin, each student's copy disguised in one of the ways of
``tools.disguises`` (names, restyled, padded, operators as functions, all of these, a ``%%writefile`` module) in turn,
plus the untouched release. The report (``python -m attention_course.grading
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
from .disguises import KINDS, disguised
from .submissions import BLANK, COMPLETE, apply_submission, read_notebook, solved_notebook, write_notebook

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


#: A catalogue alternative of 01 written in another style than the master's: its copies and the master's are
#: independent authors.
OTHER_STYLE = "alt-torch-float32"


def write_students(course: Path, n: int, assignment: str = ASSIGNMENT) -> dict:
    """Write the class; returns student -> the catalogue answer it is a disguised copy of."""
    for part in ("source", "release"):
        shutil.copytree(ROOT / part / assignment, course / part / assignment)
    masters = {p.name: read_notebook(p) for p in sorted((course / "source" / assignment).glob("*.ipynb"))}
    built, source = {}, {}
    for i, what in enumerate(roster(n, assignment).values()):  # make bench's round robin over the catalogue
        key = what if isinstance(what, str) else what.name
        if key not in built:
            built[key] = ({name: read_notebook(course / "release" / assignment / name) for name in masters}
                          if what == BLANK else {name: solved_notebook(nb) for name, nb in masters.items()}
                          if what == COMPLETE else apply_submission(masters, what))
        notebooks = built[key] if what == BLANK else disguised(built[key], KINDS[i % len(KINDS)], seed=i)
        for name, nb in notebooks.items():
            write_notebook(nb, course / "submitted" / f"student{i:04d}" / assignment / name)
        source[f"student{i:04d}"] = key
    return source


def verdicts(course: Path, source: dict) -> str:
    """How the report saw the class. Copies of an answer written in another style than the master's (flagged? lowest
    score) against independent authors (the copies of that answer against the copies of the master's: highest
    score). Copies of the master's answer and of its one-line mistakes are, at this size, copies of one source
    shared by more than the common-code limit: common code, as MOSS treats it (docs/similarity.md)."""
    pairs = json.loads((course / "report" / "similarity" / f"{ASSIGNMENT}.json").read_text(encoding="utf-8"))["pairs"]
    scores = {frozenset(p["students"]): p["score"] for p in pairs}
    own = sorted(s for s, key in source.items() if key == OTHER_STYLE)
    masters = sorted(s for s, key in source.items() if key == COMPLETE)
    copies = [scores.get(frozenset((a, b)), 0.0) for i, a in enumerate(own) for b in own[i + 1:]]
    cross = [scores.get(frozenset((a, b)), 0.0) for a in own for b in masters]
    flagged = sum(x >= 0.6 for x in copies)
    return (f"copies of {OTHER_STYLE} (each disguised): {flagged} of {len(copies)} pairs flagged, lowest "
            f"{min(copies, default=0):.2f}; against copies of the master's answer: highest {max(cross, default=0):.2f}")


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
            source = write_students(course, n)
            run = subprocess.run([sys.executable, "-c", MEASURE, str(course), ASSIGNMENT], capture_output=True,
                                 text=True, cwd=ROOT)
            if run.returncode:
                print(run.stderr[-3000:], file=sys.stderr)
                return 1
            m = json.loads(run.stdout.strip().splitlines()[-1])
            figures.append((n, m))
            print(f"{m['students']:>9} {n * (n - 1) // 2:>9} {m['compared']:>9} {m['flagged']:>8} "
                  f"{m['seconds']:>8.1f} {m['rss_mib']:>9.0f}")
            print(f"          {verdicts(course, source)}")
    (n0, m0), (n1, m1) = figures[0], figures[-1]
    print(f"From {n0} to {n1} hand-ins ({n1 / n0:.0f}x): the time grew {m1['seconds'] / m0['seconds']:.1f}x, the pairs "
          f"{n1 * (n1 - 1) / (n0 * (n0 - 1)):.0f}x, the pairs compared {m1['compared'] / max(1, m0['compared']):.1f}x.")
    return 0 if m1["seconds"] <= args.target else 1

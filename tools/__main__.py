"""Developers' commands, run from the repository: ``python -m tools demo|bench|bench-class|bench-similarity``.

``demo``        writes the demo class (complete, blank and a few realistic mistakes per assignment) into
                ``submitted/``; assignments must be released first (``make demo`` does both, then grades).
``bench``       times stock nbgrader against the course command (``bench --help``: its options).
``bench-class`` grades N synthetic hand-ins of 01, seconds per 100 as it goes.
``bench-similarity`` times the similarity report on N hand-ins of 01 (a quarter, half and all of them).
``bench-rush``  a deadline rush: N students handing in across every assignment to the grading service, latency and
                the longest queue (``bench-rush --students 14 --window 60``: a quick run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attention_course.grading.course import ROOT, available, catalogue_path

from .submissions import demo_roster, load_catalogue, write_class


def demo(course: Path) -> int:
    for assignment in available(course):
        path = catalogue_path(assignment, course)
        roster = demo_roster(load_catalogue(path) if path.exists() else [])
        write_class(course, assignment, roster)
        described = ", ".join(f"{student} ({getattr(what, 'description', what)})" for student, what in roster.items())
        print(f"{assignment}: {described}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", type=Path, default=ROOT, help="course folder (default: this repository)")
    parser.add_argument("command", choices=["demo", "bench", "bench-class", "bench-similarity", "bench-submit",
                                            "bench-rush"])
    args, extra = parser.parse_known_args(argv)
    if args.command == "demo":
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return demo(args.course.resolve())
    if args.command == "bench-submit":
        from .bench_submit import main as submit_main

        return submit_main(extra)
    if args.command == "bench-rush":
        from .bench_rush import main as rush_main

        return rush_main(extra)
    if args.command == "bench-similarity":
        from .bench_similarity import main as similarity_main

        return similarity_main(extra)
    from .bench import class_main  # their options are their own
    from .bench import main as bench_main

    return (bench_main if args.command == "bench" else class_main)(extra)


if __name__ == "__main__":
    sys.exit(main())

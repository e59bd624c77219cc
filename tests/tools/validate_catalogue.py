"""What Validate says to every catalogue mistake: ``python tests/tools/validate_catalogue.py [ASSIGNMENT ...]``.

Each mistake of ``source/<assignment>/catalogue.py`` is applied to the master with its hidden tests dropped (the
release's visible checks, what a student's Validate runs) and validated in kernels of the course's fork server
(``tests/fastvalidate.py``). Prints, per assignment, how many mistakes Validate calls a "Success" and which; with
``--json FILE`` also writes every verdict. The figures of issue 25 (before and after) come from here.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]  # tests/ and the repository (tools/)

from fastvalidate import FAILED, SUCCESS, validate_many  # noqa: E402
from harness import masters, release  # noqa: E402

from attention_course.grading.course import available, catalogue_path, scratch_course  # noqa: E402
from tools.submissions import apply_submission, load_catalogue, packed  # noqa: E402


def verdicts(course: Path, assignment: str, entries: list | None = None, pack: bool = False) -> dict[str, str]:
    """Mistake name -> what Validate says (all of its notebooks' verdicts joined), for the mistakes of ``entries``
    (by default the whole catalogue); the in-place changes autograde only notes (``noted``) are mistakes Validate
    must see too. With ``pack`` (``make test``), mistakes that change different cells and lose different grade cells
    are validated in one notebook (``tools.submissions.packed``), and each is told what Validate says of its own grade
    cells (``loses``): the failing ones among them, or Success if none fails."""
    entries = load_catalogue(catalogue_path(assignment)) if entries is None else entries
    mistakes = [s for s in entries if s.is_mistake or s.noted]
    handins = packed(mistakes) if pack else mistakes
    notebooks = {(h.name, name): nb for h in handins for name, nb in apply_submission(masters(assignment), h).items()}
    said = validate_many(course, notebooks, cells=True)
    verdict = {}
    for h in handins:
        texts = [text for (who, _), (text, _) in said.items() if who == h.name]
        failing = {cell: part for (who, _), (_, cells) in said.items() if who == h.name for cell, part in cells.items()}
        verdict[h.name] = "\n".join(texts)
        for part in h.parts:
            own = [text for cell, text in failing.items() if cell in part.loses]
            verdict[part.name] = "\n".join([f"{FAILED} ON {len(own)} CELL(S)!", *own]) if own else SUCCESS
    return {s.name: verdict[s.name] for s in mistakes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--json")
    args = parser.parse_args()
    assignments = args.assignments or [a for a in available() if catalogue_path(a).exists()]
    everything = {}
    with tempfile.TemporaryDirectory() as tmp:
        course = scratch_course(Path(tmp), assignments)
        release(course, assignments)
        for a in assignments:
            everything[a] = verdicts(course, a)
            passed = sorted(n for n, text in everything[a].items() if text.strip() == SUCCESS)
            print(f"{a}: {len(passed)} of {len(everything[a])} mistakes get Success"
                  + (f": {', '.join(passed)}" if passed else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()

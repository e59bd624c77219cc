"""Facts about this course that the tooling shares: assignments, folders, the gradebook."""

from __future__ import annotations

import csv
from pathlib import Path

#: The assignments, in teaching order; each is a folder of ``source/``.
ASSIGNMENTS = [
    "01_self_attention",
    "02_multihead_attention",
    "03_masking",
    "04_msa_attention",
    "05_hand_designed_transformers",
]

ROOT = Path(__file__).resolve().parents[2]


def available(course: Path = ROOT) -> list[str]:
    """The assignments of :data:`ASSIGNMENTS` that have a source folder in ``course``."""
    return [a for a in ASSIGNMENTS if (course / "source" / a).is_dir()]


def catalogue_path(assignment: str, course: Path = ROOT) -> Path:
    return course / "tests" / "catalogue" / f"{assignment}.py"


def score_table(db_url: str, assignments: list[str]) -> tuple[list[str], list[list]]:
    """Per-student, per-assignment scores from the gradebook.

    Returns the header and one row per student: id, a score per assignment
    (blank where nothing was submitted), the total, the maximum, and how many
    answers still wait for manual grading (in the formgrader).
    """
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        graded = [a for a in assignments if any(x.name == a for x in gb.assignments)]
        maxima = {a: gb.find_assignment(a).max_score for a in graded}
        rows = []
        for student in sorted(gb.students, key=lambda s: s.id):
            row, total, pending = [student.id], 0.0, 0
            for a in graded:
                try:
                    submission = gb.find_submission(a, student.id)
                except MissingEntry:
                    row.append("")
                    continue
                row.append(round(submission.score, 2))
                total += submission.score
                pending += sum(1 for nb in submission.notebooks for g in nb.grades if g.needs_manual_grade)
            rows.append(row + [round(total, 2), sum(maxima.values()), pending])
    header = ["student", *(f"{a} (/{maxima[a]:g})" for a in graded), "total", "max", "to grade by hand"]
    return header, rows


def write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def format_table(header: list[str], rows: list[list]) -> str:
    cells = [header] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)

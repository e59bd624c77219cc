"""Where did the class struggle? Score histograms and per-check pass rates from the gradebook.

``python -m attention_course.grading report`` writes, per assignment, ``<id>_scores.png`` (a
histogram of total scores), ``<id>_checks.png`` (the pass rate of every autograded cell, lowest
first) and one ``index.html`` page showing them with a table of the checks the class failed most.
"""

from __future__ import annotations

import html
import statistics
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook

from ..cells import check_summary
from ..course import ROOT
from ..nbgrader_glue.term import Term, standing
from .tables import MISSING, NOT_YET_DUE, autograded, not_handed_in, utc_now


@dataclass
class CheckStats:
    name: str
    points: float
    passed: int  # students with full points in this cell
    graded: int  # students graded on it
    summary: str  # the first line of the cell (its docstring)

    @property
    def rate(self) -> float:
        return self.passed / self.graded if self.graded else 0.0


def collect(db_url: str, assignment: str, term=None, course: Path | None = None, now=None
            ) -> tuple[list[float], float, list[CheckStats], dict]:
    """Final scores (after late penalties, :func:`.term.standing`), the maximum, per-autograded-cell statistics of
    one assignment, how many hand-ins were penalised for lateness and are provisional, and which students' hand-ins
    never came: "missing" after their deadline, "not yet due" before it (:func:`.course.not_handed_in` at ``now``;
    ``course``: the course folder, whose ``submitted/`` holds hand-ins not autograded yet)."""
    term = term or Term()
    now = now or utc_now()
    with Gradebook(db_url) as gb:
        a = gb.find_assignment(assignment)
        submissions = gb.assignment_submissions(assignment)
        standings = [standing(s, term) for s in submissions if autograded(s)]
        scores = [s.final for s in standings]
        counts = {"late": sum(1 for s in standings if s.penalty), "provisional": sum(1 for s in standings
                                                                                    if s.provisional)}
        came = {s.student.id for s in submissions}
        absent = {sid: not_handed_in(term, course or ROOT, sid, assignment, a.duedate, now)[0]
                  for sid in sorted(s.id for s in gb.students) if sid not in came}
        counts["missing"] = [sid for sid, cell in absent.items() if cell == MISSING]
        counts["not yet due"] = [sid for sid, cell in absent.items() if cell == NOT_YET_DUE]
        stats = {}
        for nb in a.notebooks:
            sources = {c.name: c.source for c in nb.source_cells}
            for cell in nb.grade_cells:
                if cell.cell_type != "code":
                    continue  # written answers are graded by hand
                stats[cell.name] = CheckStats(cell.name, cell.max_score, 0, 0, check_summary(sources.get(cell.name) or ""))
            for sub in nb.submissions:
                for grade in sub.grades:
                    if grade.name in stats and grade.auto_score is not None:
                        st = stats[grade.name]
                        st.graded += 1
                        st.passed += int(grade.score >= grade.max_score)
        return scores, a.max_score, sorted(stats.values(), key=lambda s: (s.rate, s.name)), counts


def plot(assignment: str, scores: list[float], max_score: float, checks: list[CheckStats], out: Path) -> tuple[Path, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    hist_path, checks_path = out / f"{assignment}_scores.png", out / f"{assignment}_checks.png"
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.hist(scores, bins=min(20, max(5, len(scores))), range=(0, max_score), color="#4c72b0", edgecolor="white")
    ax.set_xlabel(f"score (out of {max_score:g})")
    ax.set_ylabel("students")
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))  # students come whole
    ax.set_title(f"{assignment}: {len(scores)} submissions")
    fig.tight_layout()
    fig.savefig(hist_path, dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 0.32 * len(checks) + 1.2))
    rates = [100 * c.rate for c in checks]
    colors = ["#c44e52" if r < 50 else "#dd8452" if r < 80 else "#55a868" for r in rates]
    bars = ax.barh([c.name for c in checks], rates, color=colors)
    ax.bar_label(bars, labels=[f"{r:.0f}%" for r in rates], padding=3, fontsize=8)  # the rate in words, not colour alone
    ax.set_xlim(0, 112)
    ax.set_xticks(range(0, 101, 20))
    ax.invert_yaxis()
    ax.set_xlabel("students with full points (%)")
    ax.set_title(f"{assignment}: pass rate of each check")
    fig.tight_layout()
    fig.savefig(checks_path, dpi=110)
    plt.close(fig)
    return hist_path, checks_path


def scores_text(assignment: str, scores: list[float], max_score: float) -> str:
    """The histogram's text alternative: what it shows, with its key numbers."""
    low = sum(s < max_score / 2 for s in scores)
    return (f"Histogram of the total scores of {assignment}: {len(scores)} students, median "
            f"{statistics.median(scores):g} of {max_score:g}, lowest {min(scores):g}, highest {max(scores):g}, "
            f"{low} below half the points.")


def checks_text(assignment: str, checks: list[CheckStats]) -> str:
    """The pass-rate chart's text alternative: what it shows, with its key numbers."""
    if not checks:
        return f"Bar chart of the pass rate of each autograded check of {assignment}: no checks."
    low = [c for c in checks if c.rate < 0.5]
    lowest = ", ".join(f"{c.name} {100 * c.rate:.0f}%" for c in checks[:3])
    return (f"Bar chart of the share of students with full points in each of the {len(checks)} autograded checks "
            f"of {assignment}, lowest first: {lowest}; highest {checks[-1].name} {100 * checks[-1].rate:.0f}%; "
            f"{len(low)} check{'s' if len(low) != 1 else ''} below 50%. The table below lists every check.")


def absent_text(counts: dict) -> str:
    """The report's sentence on the hand-ins that never came ("" when none)."""
    missing, waiting = counts.get("missing", []), counts.get("not yet due", [])
    said = []
    if missing:
        said.append(f"{len(missing)} missing after the deadline and any extension, counted as 0 in the totals but "
                    f"not in the figures ({', '.join(missing)})")
    if waiting:
        said.append(f"{len(waiting)} not yet due (the student's deadline is still to come)")
    return f" Not handed in: {'; '.join(said)}." if said else ""


def write_report(db_url: str, assignments: list[str], out: Path, term=None, course: Path | None = None) -> Path:
    """Write the PNGs and ``index.html`` into ``out``; returns the page's path. ``term``: the course's
    :class:`.term.Term` (its late policy and due dates; default: none); ``course``: its folder."""
    out.mkdir(parents=True, exist_ok=True)
    sections = []
    for assignment in assignments:
        scores, max_score, checks, counts = collect(db_url, assignment, term, course)
        absent = html.escape(absent_text(counts))
        if not scores:
            if counts.get("missing"):  # nobody handed it in: no figures, but the missing hand-ins are said
                sections.append(f"<section>\n<h2>{html.escape(assignment)}</h2>\n<p>No submissions.{absent}</p>\n"
                                "</section>")
            continue
        hist, bars = plot(assignment, scores, max_score, checks, out)
        mean = sum(scores) / len(scores)
        similar = out / "similarity" / f"{assignment}.html"
        similar = (f' <a href="similarity/{similar.name}">Which hand-ins share their code</a> (the similarity report).'
                   if similar.is_file() else "")
        rows = "\n".join(
            f"<tr><td><code>{html.escape(c.name)}</code></td><td>{html.escape(c.summary)}</td>"
            f"<td>{c.points:g}</td><td>{c.passed}/{c.graded}</td><td>{100 * c.rate:.0f}%</td></tr>"
            for c in checks)
        sections.append(f"""<section>
<h2>{html.escape(assignment)}</h2>
<p>{len(scores)} submissions, mean {mean:.1f} of {max_score:g} (final scores: after {counts["late"]} late
penalt{"y" if counts["late"] == 1 else "ies"}; {counts["provisional"]} provisional, with answers still to grade by
hand).{absent}{similar}</p>
<img src="{hist.name}" alt="{html.escape(scores_text(assignment, scores, max_score))}">
<img src="{bars.name}" alt="{html.escape(checks_text(assignment, checks))}">
<table><caption>Autograded checks of {html.escape(assignment)}, the most failed first</caption>
<tr><th scope="col">check</th><th scope="col">what it checks</th><th scope="col">points</th>
<th scope="col">full points</th><th scope="col">pass rate</th></tr>
{rows}
</table>
</section>""")
    page = out / "index.html"
    page.write_text(f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'">
<title>Attention from Scratch: class report</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:sans-serif;line-height:1.5;color:#1f1f1f;background:#fff;max-width:60em;margin:2em auto;
padding:0 1em}} img{{max-width:100%;height:auto;display:block;margin:1em 0}} caption{{text-align:left;font-weight:bold}} h1,h2{{overflow-wrap:anywhere}}
table{{border-collapse:collapse;max-width:100%}} td,th{{border:1px solid #767676;padding:.25em .5em;text-align:left;
overflow-wrap:anywhere}} @media (min-width:40em){{th{{overflow-wrap:normal}}}} a{{color:#0b57a4;text-decoration:underline}}</style></head>
<body><main><h1>Class report</h1>
<p>Checks are listed from the one the class failed most. Written answers are graded by hand and not shown.</p>
{''.join(sections) or '<p>No submissions have been autograded yet.</p>'}
</main></body></html>
""", encoding="utf-8")
    return page

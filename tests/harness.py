"""Real nbgrader runs in scratch course folders, shared by the grading tests."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from attention_course.checks import EXPECTED_LOG
from attention_course.grading.course import ROOT, catalogue_path, cell_scores, gradebook_url, scratch_course
from attention_course.grading.nbgrader_ext import (
    BEGIN_HIDDEN, BEGIN_STARTER, END_HIDDEN, END_STARTER, replace_blocks, uncomment,
)
from attention_course.grading.submissions import (
    BEGIN_SOLUTION, END_SOLUTION, Submission, catalogue_roster, load_catalogue, read_notebook, write_class,
)

BIN = Path(sys.executable).parent


def masters(assignment: str) -> dict[str, dict]:
    """An assignment's master notebooks, by file name."""
    return {p.name: read_notebook(p) for p in sorted((ROOT / "source" / assignment).glob("*.ipynb"))}


def split_master(nb: dict) -> tuple[set[str], set[str], set[str]]:
    """Stripped lines of a master: (solution-only, hidden-only, everything a student may see)."""
    solution, hidden, visible = set(), set(), set()
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        src = replace_blocks(src, BEGIN_HIDDEN, END_HIDDEN, lambda b, i: hidden.update(b) or [])
        src = replace_blocks(src, BEGIN_SOLUTION, END_SOLUTION, lambda b, i: solution.update(b) or [])
        src = replace_blocks(src, BEGIN_STARTER, END_STARTER, uncomment)
        visible.update(src.split("\n"))
    norm = lambda lines: {l.strip() for l in lines if len(l.strip()) >= 12 and not l.strip().startswith("#")}
    seen, solution = norm(visible), norm(solution)
    return solution - seen, norm(hidden) - seen - solution, seen


def trains_a_model(assignment: str) -> bool:
    """Whether a master trains a model (it prints ``step …``) and shortens it under NBGRADER_EXECUTION."""
    sources = ["".join(c["source"]) for nb in masters(assignment).values() for c in nb["cells"]]
    return any("NBGRADER_EXECUTION" in s for s in sources) and any('f"step {' in s for s in sources)


COURSE_ID = "attention-from-scratch"


def as_student(home, user: str, exchange, *args: str) -> subprocess.CompletedProcess:
    """An nbgrader command run by a student: their own folder, the course's exchange, and their id (every
    test student is the same system user here; on JupyterHub each one's user name is their id)."""
    env = dict(os.environ, USER=user, LOGNAME=user, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("JUPYTERHUB_USER", None)
    quiet = [] if args[0] == "list" else ["--log-level=WARN"]  # `list` tells what it finds in its log
    if args[0] in ("submit", "fetch_feedback"):
        quiet.append(f"--student={user}")
    proc = subprocess.run([str(BIN / "nbgrader"), *args, f"--course={COURSE_ID}", f"--Exchange.root={exchange}",
                           *quiet], cwd=home, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} as {user} failed:\n{proc.stderr[-3000:]}"
    return proc


def answer_into(fetched: Path, answered: dict) -> None:
    """Write the answers of notebook ``answered`` into the released notebook ``fetched`` a student works in
    (its cells, ids and metadata kept: only the source of solution cells changes)."""
    released = read_notebook(fetched)
    by_id = {c["metadata"].get("nbgrader", {}).get("grade_id"): c for c in answered["cells"]}
    for cell in released["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid and gid in by_id and cell["metadata"]["nbgrader"].get("solution"):
            cell["source"] = by_id[gid]["source"]
    fetched.write_text(json.dumps(released), encoding="utf-8")


def nbgrader(course: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one nbgrader command in ``course`` with the venv first on PATH."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    quiet = [] if args[0] == "validate" else ["--log-level=WARN"]  # validate takes no log level
    proc = subprocess.run([str(BIN / "nbgrader"), *args, *quiet], cwd=course, env=env,
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


RELEASE = """
import sys
from nbgrader.apps.api import NbGraderAPI
from nbgrader.apps.baseapp import NbGrader
app = NbGrader()
app.initialize([])
if sys.argv[1]:
    app.config.CourseDirectory.db_url = sys.argv[1]
api = NbGraderAPI(parent=app)
for assignment in sys.argv[2:]:
    result = api.generate_assignment(assignment, force=True, create=True)
    if not result["success"]:
        sys.exit(f"{assignment}: {result.get('error', '')}{result.get('log', '')}")
"""


def release(course: Path, assignments: list[str], db_url: str = "") -> None:
    """``nbgrader generate_assignment`` for several assignments in one process (into ``db_url`` if given)."""
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-c", RELEASE, db_url, *assignments], cwd=course, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"releasing {assignments} failed:\n{proc.stderr[-4000:]}")


def course_autograde(course: Path, *args: str, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the course's parallel autograde command (``make autograde``) in ``course`` (``env``: extra variables)."""
    env = dict(os.environ, **(env or {}), PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-m", "attention_course.grading", "--course", str(course), "autograde",
                           *args], cwd=course, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"autograde {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def new_course(tmp: Path, assignments: list[str]) -> Path:
    """A scratch course holding this repository's config and the given assignments' sources."""
    return scratch_course(tmp, assignments)


@dataclass
class GradedClass:
    """One assignment released, submitted by a whole synthetic class, autograded and given feedback."""

    course: Path
    assignment: str
    catalogue: list[Submission]
    students: list[str]
    autograde_log: str
    scores: dict = field(default_factory=dict)  # student -> {grade cell: (score, max, needs_manual)}

    def feedback_text(self, student: str) -> str:
        """The text of a student's feedback pages, tags removed and entities decoded."""
        return feedback_text(self.course, student, self.assignment)


def feedback_text(course: Path, student: str, assignment: str) -> str:
    """The text of a student's feedback pages, tags removed and entities decoded."""
    texts = []
    for page in sorted((course / "feedback" / student / assignment).glob("*.html")):
        markup = re.sub(r"(?is)<(style|script)\b.*?</\1>", "", page.read_text(encoding="utf-8"))
        texts.append(html.unescape(re.sub(r"<[^>]+>", "", markup)))
    return "\n".join(texts)


def read_scores(course: Path, assignment: str, db_url: str | None = None) -> dict:
    return cell_scores(db_url or gradebook_url(course), assignment)


def grade_class(tmp: Path, assignment: str) -> GradedClass:
    """Release ``assignment``, submit its catalogue, autograde everything (the course command), write feedback."""
    course = new_course(tmp, [assignment])
    nbgrader(course, "generate_assignment", assignment, "--force")
    catalogue = load_catalogue(catalogue_path(assignment))
    students = write_class(course, assignment, catalogue_roster(catalogue))
    expected = course / "expected-values.jsonl"  # every value a check compared against (checks.EXPECTED_LOG)
    log = course_autograde(course, assignment, "--force", env={EXPECTED_LOG: str(expected)}).stderr
    nbgrader(course, "generate_feedback", assignment, "--force")
    return GradedClass(course, assignment, catalogue, students, log, read_scores(course, assignment))

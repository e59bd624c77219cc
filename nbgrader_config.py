"""nbgrader configuration for the Attention from Scratch course.

Run every nbgrader command from this folder (the Makefile does), with the
course's virtual environment first on PATH.
"""

from attention_course.grading.errors import CourseError
from attention_course.grading.nbgrader_glue import patches

# The course's changes to nbgrader's own code (attention_course/grading/nbgrader_glue/patches.py: the course's collect,
# the exchange's permissions, the term's due dates, hand grades that outlive regrades, the Formgrader's pages),
# installed here, before nbgrader builds anything, for every nbgrader command and server this file configures.
try:
    patches.install()
except CourseError as exc:  # the wrong nbgrader: stop the command with the course's words (traitlets would go on)
    raise SystemExit(str(exc)) from None

from nbconvert.preprocessors import (
    ClearMetadataPreprocessor,  # noqa: E402
    CSSHTMLHeaderPreprocessor,
)
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ClearSolutions,
    ComputeChecksums,
    Execute,
    IncludeHeaderFooter,
    InstantiateTests,
    LimitOutput,
    LockCells,
    SaveAutoGrades,
    SaveCells,
)

from attention_course.grading.course import CATALOGUE, COURSE_ID, FINGERPRINT
from attention_course.grading.judging.executor import JudgedExecute
from attention_course.grading.nbgrader_glue.handgrades import KeepHandGrades
from attention_course.grading.nbgrader_glue.preprocessors import (
    DropStarterCode,
    GetGradesShowPending,
    HideHiddenTests,
    QuietTestCells,
    ReleaseStarterCode,
    TrustGradebook,
)
from attention_course.grading.nbgrader_glue.term import ApplyTerm, LatePolicy, ReleaseDueDate

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

# nbgrader 0.9.6 and nbformat warn about their own internals on every hand-in (SQLAlchemy's
# "not in session" autoflush notes, cells without ids in old notebooks): nothing an instructor can act on.
import os  # noqa: E402
import warnings  # noqa: E402

from nbformat.warnings import MissingIDFieldWarning  # noqa: E402
from sqlalchemy.exc import SAWarning  # noqa: E402

warnings.filterwarnings("ignore", category=SAWarning)
warnings.filterwarnings("ignore", category=MissingIDFieldWarning)

c.CourseDirectory.course_id = COURSE_ID  # "attention-from-scratch"
# The course is this file's folder wherever nbgrader starts (a JupyterHub server opened on it starts in the home).
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))

# --- Exchange (release, fetch, submit, collect, feedback) -----------------------
# Out of the box the exchange is a folder of the course (exchange/, git-ignored), so the Assignment
# List and `nbgrader release_assignment` / `fetch_assignment` / `submit` / `collect` work on one
# machine. On JupyterHub, point every user at one shared folder (world-writable, sticky, like /tmp): set
# Exchange.root in the system's nbgrader configuration (/etc/jupyter/nbgrader_config.py), which this file then
# keeps (an ssh or cron shell of the instructor finds the class's exchange too), or NBGRADER_EXCHANGE_ROOT for
# the servers (docs/jupyterhub.md); the variable wins (attention_course.grading.course.exchange_root).
from pathlib import Path  # noqa: E402

from attention_course.grading.course import exchange_root  # noqa: E402

c.Exchange.root = exchange_root(Path(__file__).resolve().parent)
os.makedirs(c.Exchange.root, mode=0o777, exist_ok=True)  # nbgrader requires it to exist
# The assignments are the folders of source/ named NN_name, in the order of their numbers
# (attention_course.grading.course.available, which the Makefile and the tests iterate over).
c.CourseDirectory.solution_directory = "solutions"
# Files nbgrader never copies between folders: its defaults, the grader's fingerprint of a graded hand-in
# (autograded/<student>/<assignment>/), which must not travel into feedback/ to students, and each assignment's
# catalogue of synthetic hand-ins (source/<id>/catalogue.py: complete alternative answers among them), which must
# not travel into the release or the solutions.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", FINGERPRINT, CATALOGUE]

# --- Releasing -------------------------------------------------------------
# Stock pipeline plus starter code (see attention_course/grading/nbgrader_glue/preprocessors.py).
c.GenerateAssignment.preprocessors = [
    IncludeHeaderFooter,
    InstantiateTests,
    LockCells,
    ReleaseStarterCode,
    ClearSolutions,
    ClearOutput,
    CheckCellMetadata,
    ComputeChecksums,
    SaveCells,
    ClearHiddenTests,
    QuietTestCells,
    ClearMarkScheme,
    ComputeChecksums,
    CheckCellMetadata,
    ReleaseDueDate,  # c.Term.due's date into the gradebook, and stated at the top of each notebook (term.py)
]
# Solutions may be published after the deadline: they run the visible tests
# only, and never show the hidden ones.
# nbgrader's own execution (solutions, Validate) waits longer than its defaults: validate_settings below.
# A written answer's mark scheme sits inside its solution region (marking.py): the release loses both with the
# solution; the posted solutions keep the model answer and lose the scheme (nbgrader's ClearMarkScheme, which
# would otherwise insist on "task" cells: ours are answer cells with a grade id).
c.ClearMarkScheme.enforce_metadata = False
c.GenerateSolution.preprocessors = [
    IncludeHeaderFooter,
    LockCells,
    DropStarterCode,
    ClearHiddenTests,
    QuietTestCells,
    ClearOutput,
    ClearMarkScheme,
    Execute,
]

# --- Autograding -----------------------------------------------------------
# A submission is untrusted code. Its cells' roles and points come from the gradebook only
# (TrustGradebook); student cells run in a sandboxed kernel and every test cell runs in the
# judge, outside that kernel (JudgedExecute; see attention_course/grading/judging/executor.py).
c.Autograde.sanitize_preprocessors = [TrustGradebook]
c.Autograde.autograde_preprocessors = [
    JudgedExecute,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    KeepHandGrades,  # a written answer graded by hand keeps its grade while its text is unchanged (handgrades.py)
    ApplyTerm,  # the due date and the student's extension, from c.Term below, into the gradebook
    AssignLatePenalties,
    CheckCellMetadata,
]
c.AssignLatePenalties.plugin_class = LatePolicy
# A cell (or the student code one test calls) may run for at most a minute; the slowest
# solution cell takes well under a second. The kernel may use at most 4 GiB and 64 processes.
c.JudgedExecute.timeout = 60
c.JudgedExecute.memory_limit = 4 * 2**30
c.JudgedExecute.processes = 64

# --- The term: due dates, the late policy, extensions -----------------------------
# One place for the deadlines (attention_course/grading/nbgrader_glue/term.py applies them in every autograde, stock nbgrader's and
# the Formgrader's included, and puts them into the gradebook at each release: `make release`, generate_assignment,
# release_assignment). A released notebook states its due date in its first cell; a student's feedback page gives the
# due date and her own deadline with her extension. Change a date, then `make release` (and release again) or
# autograde: the gradebook takes the new one. A due date carries its zone (a name, or an ISO offset
# '2027-01-22T17:00:00+01:00'); an assignment left out has none (or the one set in the Formgrader).
# A hand-in loses late_share_per_day of its score for each day or part of a day late, at most late_cap.
# Extensions: extensions.csv in this folder, with the columns student,assignment,days (days may be fractional).
# The grade table, grades.csv, the Canvas export, the report and the feedback pages show the penalty and the final
# score; fix a date or grant an extension, then `make autograde FORCE=1` records the penalties again.
c.Term.due = {
    # "01_self_attention": "2027-01-22 17:00:00 Europe/London",
}
c.Term.late_share_per_day = 0.10
c.Term.late_cap = 0.50
c.Term.extensions = "extensions.csv"

# --- Feedback at submit ------------------------------------------------------------
# `make serve` (python -m attention_course.grading serve; on JupyterHub a hub-managed service) grades each hand-in of
# these assignments as it comes and releases its feedback page to the student, before the deadline; after a student's
# deadline (c.Term above, extensions included) the usual commands take over. At most one graded hand-in per student
# and assignment every minutes_between minutes; show = "page" (scores and each failed check's message, never hidden
# tests) or "score" (the score alone). docs/grading.md, "Feedback at submit".
c.OnSubmit.assignments = []  # e.g. ["01_self_attention", "02_multihead_attention"]
c.OnSubmit.minutes_between = 10
c.OnSubmit.show = "page"

# --- Validate (the students' button) ------------------------------------------
# Stderr dropped before judging, whole lines, longer waits: one function, which the students' servers on
# JupyterHub call too (deploy/jupyterhub/student/nbgrader_config.py), so both Validates agree.
from attention_course.nbgrader_settings import validate_settings  # noqa: E402

validate_settings(c)

# --- Feedback --------------------------------------------------------------
# Pages that work offline: formulas become MathML (TypesetMath, also in Formgrader) and the course's
# feedback template (attention_course/grading/nbgrader_glue/templates/feedback) loads nothing from the network and
# shows "not graded yet" for a written answer no one has scored. nbgrader's own templates stay second
# in the search path for Formgrader's pages.
import nbgrader  # noqa: E402

# Student content is inert in every page (the Formgrader's submission view, feedback): outputs from a hand-in
# show as text and raster images only (InertContent), and HTML made from Markdown or raw cells passes the
# course's sanitiser (trust.clean_html, nh3) in place of nbconvert's clean_html and, after every rendering of
# Markdown (Formgrader's and the feedback page's own blocks included), of its strip_files_prefix filter.
# In the Formgrader's submission page only, each written answer is followed by its marking guide (question, model
# answer, mark scheme from source/) and a link to grade that question for every hand-in (marking.py).
from attention_course.grading.nbgrader_glue.marking import ShowMarkScheme  # noqa: E402
from attention_course.grading.nbgrader_glue.mathml import TypesetMath  # noqa: E402
from attention_course.grading.nbgrader_glue.preprocessors import CODE_STYLE, TEMPLATES, InertContent, PageExporter  # noqa: E402
from attention_course.grading.trust import clean_html, clean_markdown_html  # noqa: E402

c.HTMLExporter.preprocessors = [ShowMarkScheme, TypesetMath, InertContent]
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"clean_html": clean_html, "strip_files_prefix": clean_markdown_html}
c.HTMLExporter.extra_template_basedirs = [
    TEMPLATES, os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader", "templates")]
# Show each failed check's message, never hidden-test source or tracebacks through it, and for
# the student's own cells the outputs of the notebook they handed in, never autograde-time output.
c.GenerateFeedback.preprocessors = [GetGradesShowPending, HideHiddenTests, CSSHTMLHeaderPreprocessor]
c.GenerateFeedback.exporter_class = PageExporter
# Code is coloured with a style whose every colour has at least 4.5:1 contrast (accessible-pygments; WCAG 2.1 AA).
c.CSSHTMLHeaderPreprocessor.style = CODE_STYLE

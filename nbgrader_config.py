"""nbgrader configuration for the Attention from Scratch course.

Run every nbgrader command from this folder (the Makefile does), with the
course's virtual environment first on PATH.
"""

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    ClearSolutions,
    ComputeChecksums,
    Execute,
    GetGrades,
    IncludeHeaderFooter,
    InstantiateTests,
    LimitOutput,
    LockCells,
    SaveAutoGrades,
    SaveCells,
)
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

from attention_course.grading.executor import JudgedExecute
from attention_course.grading.nbgrader_ext import DropStarterCode, HideHiddenTests, ReleaseStarterCode, TrustGradebook

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)

c.CourseDirectory.course_id = "attention-from-scratch"
# The assignments, in teaching order, are listed once: ASSIGNMENTS in
# attention_course/grading/course.py, which the Makefile and the tests iterate over.
c.CourseDirectory.solution_directory = "solutions"

# --- Releasing -------------------------------------------------------------
# Stock pipeline plus starter code (see attention_course/grading/nbgrader_ext.py).
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
    ClearMarkScheme,
    ComputeChecksums,
    CheckCellMetadata,
]
# Solutions may be published after the deadline: they run the visible tests
# only, and never show the hidden ones.
c.GenerateSolution.preprocessors = [
    IncludeHeaderFooter,
    LockCells,
    DropStarterCode,
    ClearHiddenTests,
    ClearOutput,
    ClearMarkScheme,
    Execute,
]

# --- Autograding -----------------------------------------------------------
# A submission is untrusted code. Its cells' roles and points come from the gradebook only
# (TrustGradebook); student cells run in a sandboxed kernel and every test cell runs in the
# judge, outside that kernel (JudgedExecute; see attention_course/grading/executor.py).
c.Autograde.sanitize_preprocessors = [TrustGradebook]
c.Autograde.autograde_preprocessors = [
    JudgedExecute,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]
# A cell (or the student code one test calls) may run for at most a minute; the slowest
# solution cell takes well under a second. The kernel may use at most 4 GiB and 64 processes.
c.JudgedExecute.timeout = 60
c.JudgedExecute.memory_limit = 4 * 2**30
c.JudgedExecute.processes = 64

# --- Feedback --------------------------------------------------------------
# Show each failed check's message, never hidden-test source or tracebacks through it, and for
# the student's own cells the outputs of the notebook they handed in, never autograde-time output.
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]

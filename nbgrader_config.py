"""nbgrader configuration for the Attention from Scratch course.

Run every nbgrader command from this folder (the Makefile does), with the
course's virtual environment first on PATH.
"""

from nbgrader.preprocessors import (
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
    LockCells,
    SaveCells,
)
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor

from attention_course.grading.nbgrader_ext import DropStarterCode, HideHiddenTests, ReleaseStarterCode

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
# A cell may run for at most a minute; the slowest solution cell takes well under a second.
c.Execute.timeout = 60
# A student who deletes a grade cell gets it back (and is graded on it).
c.OverwriteCells.add_missing_cells = True
# A warning printed on stderr (a PyTorch UserWarning, a DeprecationWarning) must not
# zero a correct answer: drop stderr output that is a Python warning.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"(?m)^.*:\d+: \w*Warning: "

# --- Feedback --------------------------------------------------------------
# Show each failed check's message, never hidden-test source or tracebacks through it.
c.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]

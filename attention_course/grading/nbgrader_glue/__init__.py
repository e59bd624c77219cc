"""The course inside nbgrader: its preprocessors, its changes to nbgrader's code, its pages.

:mod:`.preprocessors` are the steps the course adds to nbgrader's pipelines (named in ``nbgrader_config.py``);
:mod:`.patches` is every change to nbgrader's own code, installed by an explicit :func:`install` from the entry
points (``nbgrader_config.py``, the course command), never on import, with :mod:`.speedups` (work nbgrader
repeats, done once); :mod:`.collect` is the course's collect,
:mod:`.term` the due dates, late policy and extensions, :mod:`.handgrades` hand grades that outlive regrades,
:mod:`.marking` the mark schemes beside each written answer, :mod:`.questions` the question pages (every
answer to one question, one after another), :mod:`.formgrader` the Formgrader's pages, :mod:`.page_cap`
a page's size cap, :mod:`.mathml` formulas without a network, :mod:`.solutions` the solutions' pages,
:mod:`.gradebook` what the gradebook holds of an assignment, putting one into it, and its one writer's lock,
:mod:`.regrade` a changed page sent again to its student.
"""

from ..exports import lazy

#: Each public name and the module that defines it.
EXPORTS = {
    "collect_one": "collect",
    "handed_in": "collect",
    "nbgrader_rules": "collect",
    "KeepHandGrades": "handgrades",
    "ShowMarkScheme": "marking",
    "question": "marking",
    "TypesetMath": "mathml",
    "to_mathml": "mathml",
    "typeset": "mathml",
    "MAX_PAGE_BYTES": "page_cap",
    "install": "patches",
    "check_version": "patches",
    "CODE_STYLE": "preprocessors",
    "CachedHighlight": "preprocessors",
    "DropStarterCode": "preprocessors",
    "GetGradesShowPending": "preprocessors",
    "HIDDEN_PLACEHOLDER": "preprocessors",
    "HideHiddenTests": "preprocessors",
    "InertContent": "preprocessors",
    "PageExporter": "preprocessors",
    "QuietTestCells": "preprocessors",
    "ReleaseStarterCode": "preprocessors",
    "TEMPLATES": "preprocessors",
    "TrustGradebook": "preprocessors",
    "submitted_outputs": "preprocessors",
    "write_pages": "solutions",
    "ApplyTerm": "term",
    "LatePolicy": "term",
    "ReleaseDueDate": "term",
    "Term": "term",
    "course_term": "term",
    "late_words": "term",
    "standing": "term",
}
__all__ = sorted(EXPORTS)
__getattr__, __dir__ = lazy(__name__, EXPORTS)

"""Grading a class: the course command's plan, its workers, and what is made of the grades.

:mod:`.autograde` is ``python -m attention_course.grading autograde``: the gradebook prepared
(:mod:`..nbgrader_glue.gradebook`), the hand-ins that need grading planned from their fingerprints (:mod:`.plan`),
the sandbox checked on this host (:mod:`.doctor`), the hand-ins graded by local grading processes (:mod:`.worker`)
or on a Dask cluster (:mod:`.cluster`), each hand-in's :class:`.outcome.Outcome` (:mod:`.outcome`: what it came to,
and whose a failure is), with progress and each failure's cause shown (:mod:`.progress`), and each changed page
sent again (:mod:`..nbgrader_glue.regrade`). :mod:`.tables` is the grade table and its exports (``grades.csv``,
Canvas), :mod:`.report` draws where the class struggled.
"""

from ..exports import lazy

#: Each public name and the module that defines it.
EXPORTS = {
    "check_sandbox": "autograde",
    "run": "autograde",
    "course_payload": "cluster",
    "grade": "cluster",
    "grade_on_worker": "cluster",
    "prepare": "cluster",
    "read_tree": "cluster",
    "recorder": "cluster",
    "use_scratch": "cluster",
    "worker_name": "cluster",
    "exchange_findings": "doctor",
    "main": "doctor",
    "probe": "doctor",
    "refused": "doctor",
    "Job": "plan",
    "course_fingerprint": "plan",
    "fingerprint": "plan",
    "grading_base": "plan",
    "handin_fingerprint": "plan",
    "Progress": "progress",
    "failure_cause": "progress",
    "notable_lines": "progress",
    "traceback_cause": "progress",
    "collect": "report",
    "write_report": "report",
    "MISSING": "tables",
    "NOT_GRADED": "tables",
    "NOT_YET_DUE": "tables",
    "Provisional": "tables",
    "canvas_table": "tables",
    "cell_scores": "tables",
    "format_table": "tables",
    "printable": "tables",
    "score_table": "tables",
    "write_csv": "tables",
    "drop_pool": "worker",
    "grade_locally": "worker",
    "sandbox_settings": "worker",
    "worker_api": "worker",
    "worker_init": "worker",
}
__all__ = sorted(EXPORTS)
__getattr__, __dir__ = lazy(__name__, EXPORTS)

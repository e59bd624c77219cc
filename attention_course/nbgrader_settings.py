"""What students' nbgrader needs of the course, with nothing of the grading code: the course id and the course's
Validate settings. The course's own ``nbgrader_config.py``, every student's server on JupyterHub
(``deploy/jupyterhub/student/nbgrader_config.py``) and the student bundle (``make student-bundle``) read them here,
so that every Validate is the course's."""

from __future__ import annotations

#: nbgrader's course id of this course (the exchange's folder, the hub's groups).
COURSE_ID = "attention-from-scratch"


def validate_settings(c) -> None:
    """The course's Validate (and nbgrader's own execution of a notebook), set on config ``c``: by the course's
    nbgrader_config.py and by every student's server on JupyterHub (deploy/jupyterhub/student/nbgrader_config.py),
    which reads the global configuration only, so that a student's Validate is the course's."""
    from nbgrader.preprocessors import IgnorePattern
    from nbgrader.validator import Validator

    # nbgrader waits at most 4 s, by default, for a cell's last output after its reply, and 30 s for a cell to
    # finish: assignment 5's full training (about 9 s alone) takes longer on a busy machine (solutions generated
    # while a class is graded), and the whole notebook would fail. The course's cells have their own time limit.
    c.Execute.iopub_timeout = 30
    c.Execute.timeout = 300
    # Validate runs a notebook in the student's own kernel and, stock, fails every test cell that printed anything
    # on stderr (a PyTorch UserWarning, say). Autograde judges tests outside that kernel, where nothing printed can
    # cost points; so that both agree, Validate drops stderr before it judges. (nbgrader 0.9.6 does not expose
    # Validator.preprocessors to configuration: its default list is extended.)
    steps = Validator.class_traits()["preprocessors"].default_args[0]
    if IgnorePattern not in steps:
        steps.append(IgnorePattern)
    c.IgnorePattern.enabled = True
    c.IgnorePattern.pattern = r"(?s)."
    # Validate cuts every line of its report at 90 characters; a check's message names the misconception at its
    # end, so lines are kept whole.
    c.Validator.width = 10000

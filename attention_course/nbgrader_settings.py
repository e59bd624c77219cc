"""What students' nbgrader needs of the course, with nothing of the grading code: the course id and the course's
Validate settings. The course's own ``nbgrader_config.py``, every student's server on JupyterHub
(``deploy/jupyterhub/student/nbgrader_config.py``) and the student bundle (``make student-bundle``) read them here,
so that every Validate is the course's."""

from __future__ import annotations

import re

#: nbgrader's course id of this course (the exchange's folder, the hub's groups).
COURSE_ID = "attention-from-scratch"


#: Validate's limits, for a hub at a deadline where every student's Validate runs on one loaded machine (a kernel of
#: the course starts in about 2 s alone, a cell's output follows its reply within milliseconds, the longest notebook
#: runs in about 20 s): a kernel start may take 5 minutes, a cell's last output 60 s after its reply, a cell 5 minutes.
STARTUP_TIMEOUT, IOPUB_TIMEOUT, CELL_TIMEOUT = 300, 60, 300

#: What a cell that ran out of time says (a cell's limit, CELL_TIMEOUT).
TIMEOUT_TEXT = (f"CellTimeoutError: this cell did not finish within {CELL_TIMEOUT} s, Validate's limit. The course's "
                "cells take seconds, so either the code loops without end or the machine is overloaded (on the course's "
                "hub near a deadline, say): if nothing in the cell can loop forever, run Validate again later.")


def validate_settings(c) -> None:
    """The course's Validate (and nbgrader's own execution of a notebook), set on config ``c``: by the course's
    nbgrader_config.py, by every student's server on JupyterHub (deploy/jupyterhub/student/nbgrader_config.py),
    which reads the global configuration only, and by the student bundle, so that a student's Validate is the
    course's."""
    from nbgrader.preprocessors import Execute, IgnorePattern
    from nbgrader.validator import Validator

    # Limits for a loaded machine (the figures above). A cell's output late after its reply no longer fails the whole
    # notebook (nbgrader raises by default, after nbclient's 4 s): the reply decides, and an error in it is recorded.
    c.Execute.startup_timeout = STARTUP_TIMEOUT
    c.Execute.iopub_timeout = IOPUB_TIMEOUT
    c.Execute.raise_on_iopub_timeout = False
    c.Execute.timeout = CELL_TIMEOUT
    c.Execute.error_on_timeout = {"ename": "CellTimeoutError", "evalue": "", "traceback": [TIMEOUT_TEXT]}
    steps = Validator.class_traits()["preprocessors"].default_args[0]
    # A kernel that does not start in time is the machine's doing: said so, instead of nbclient's traceback.
    steps[:] = [course_execute() if step is Execute else step for step in steps]
    # Validate runs a notebook in the student's own kernel and, stock, fails every test cell that printed anything
    # on stderr (a PyTorch UserWarning, say). Autograde judges tests outside that kernel, where nothing printed can
    # cost points; so that both agree, Validate drops stderr before it judges. (nbgrader 0.9.6 does not expose
    # Validator.preprocessors to configuration: its default list is extended.)
    if IgnorePattern not in steps:
        steps.append(IgnorePattern)
    c.IgnorePattern.enabled = True
    c.IgnorePattern.pattern = r"(?s)."
    # A cell of the course's (locked, no points: the imports) that fails to import is named first by every check
    # after it, with its error: a PyTorch that does not import reads as that, not as NameErrors in sixteen checks.
    if not any(getattr(step, "__name__", "") == "CourseCellFailed" for step in steps):
        steps.append(course_cell_failed())
    # Validate cuts every line of its report at 90 characters; a check's message names the misconception at its
    # end, so lines are kept whole.
    c.Validator.width = 10000


_made: dict[str, type] = {}


def course_execute() -> type:
    """nbgrader's ``Execute``, saying in words that the machine, not the notebook, failed when a kernel does not
    start within :data:`STARTUP_TIMEOUT` (made once: Validate's step list holds classes)."""
    if "execute" not in _made:
        from nbgrader.preprocessors import Execute

        class CourseExecute(Execute):
            def preprocess(self, nb, resources, *args, **kwargs):
                try:
                    return super().preprocess(nb, resources, *args, **kwargs)
                except RuntimeError as exc:
                    if "didn't respond" not in str(exc) and "timed out" not in str(exc).lower():
                        raise
                    raise RuntimeError(
                        f"No Python kernel answered within {STARTUP_TIMEOUT} s: the machine was too busy, or the "
                        "kernel could not start or connect (a firewall that blocks connections on this computer "
                        "itself, say). This says nothing about your answers: run Validate again in a few minutes, "
                        "and if it says the same, tell your instructor.") from exc

        _made["execute"] = CourseExecute
    return _made["execute"]


def course_cell_failed() -> type:
    """After the notebook ran: where a cell of the course's (locked, no points, before the first answer cell) failed to
    import a package, every test cell that failed after it starts its error with that cell's (the first one with the
    whole traceback); a check that failed on a ``NameError`` (a name that cell would have made) says only that, any
    other keeps its own error after the note. Only imports: a course's cell that fails otherwise may be running the
    student's code, and is not named."""
    if "cell" not in _made:
        from nbconvert.preprocessors import Preprocessor

        class CourseCellFailed(Preprocessor):
            def preprocess(self, nb, resources):
                broken, told, answered = None, False, False
                for index, cell in enumerate(nb.cells):
                    meta = cell.metadata.get("nbgrader", {})
                    answered = answered or bool(meta.get("solution"))
                    if cell.cell_type != "code":
                        continue
                    errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
                    if not errors:
                        continue
                    if broken is None and not answered and meta.get("locked") and not meta.get("grade") \
                            and _import_failed(errors[0]):
                        first = next((line.strip() for line in cell.source.splitlines() if line.strip()), "")
                        broken = (f"A cell of the course's above this check (cell {index + 1}, starting {first[:60]!r}) "
                                  f"could not import a package: {errors[0].get('ename')}: "
                                  f"{str(errors[0].get('evalue', ''))[:300]}. Look at the installation first (on "
                                  "the course's hub: tell your instructor), or for a file of yours named like that "
                                  "package; then validate again.", list(errors[0].get("traceback", [])))
                    elif broken is not None and meta.get("grade"):
                        for out in errors:
                            own = [] if out.get("ename") == "NameError" else ["", *out.get("traceback", [])]
                            out["traceback"] = [broken[0], *([] if told else ["", *broken[1]]), *own]
                        told = True
                return nb, resources

        _made["cell"] = CourseCellFailed
    return _made["cell"]


def _import_failed(error: dict) -> bool:
    """An import that failed: ImportError, or a library that would not load (``OSError`` on an import line: a DLL on
    Windows, say)."""
    if error.get("ename") in ("ImportError", "ModuleNotFoundError"):
        return True
    trace = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(error.get("traceback", [])))
    return error.get("ename") == "OSError" and re.search(r"^-*> *\d+ *(import|from) ", trace, re.M) is not None

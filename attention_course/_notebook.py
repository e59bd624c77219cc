"""How a failed check looks in a notebook.

A check that fails raises ``AssertionError`` deep inside :mod:`attention_course.checks`; IPython would
show those frames (the check's own code, its arguments, its ``raise``) above the message, where a
student looks for their mistake. In an IPython kernel this module drops the frames of the course's
package from such tracebacks: the student sees the line of their cell (or of their own function) that
led to the failure and the check's message. Everything else is shown exactly as IPython shows it.
"""

from __future__ import annotations

import os
import types

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _ours(tb) -> bool:
    return os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE)


def without_course_frames(tb):
    """A copy of the traceback chain ``tb`` without the frames of this package's files."""
    kept = []
    while tb is not None:
        if not _ours(tb):
            kept.append(tb)
        tb = tb.tb_next
    chain = None
    for t in reversed(kept):
        chain = types.TracebackType(chain, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return chain


def _show(shell, etype, value, tb, tb_offset=None):
    shell.showtraceback((etype, value, without_course_frames(tb)), tb_offset=tb_offset,
                        running_compiled_code=True)


def install() -> bool:
    """In an IPython kernel, show failed checks without the checks' own frames; True if installed.

    Only ``AssertionError`` is affected, and only the course's frames are dropped, so a student's own
    ``assert`` keeps its full traceback. A shell that already has custom handlers is left alone."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return False
    if shell.custom_exceptions and shell.custom_exceptions != (AssertionError,):
        return False
    shell.set_custom_exc((AssertionError,), _show)
    return True

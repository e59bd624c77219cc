"""What goes wrong in a check, as the judge sees it: the kernel gone or too slow (:class:`GradingInterrupt`, never the
student's fault to grade around), and the exceptions the student's code raised in her kernel, rebuilt in the judge
as Python's own classes or :class:`StudentError` (:func:`remote_error`), their text kept off a hidden test's page.
"""

from __future__ import annotations

import builtins
import sys


class GradingInterrupt(BaseException):
    """The kernel stopped answering in time, or died: the cell fails (tests cannot catch this)."""


class KernelTimeout(GradingInterrupt):
    pass


class KernelGone(GradingInterrupt):
    pass


class StudentError(Exception):
    """An exception raised by the student's code that is not one of Python's built-in ones."""


_BUILTIN_ERRORS = {name: obj for name, obj in vars(builtins).items()
                   if isinstance(obj, type) and issubclass(obj, Exception)
                   and obj not in (StopIteration, StopAsyncIteration)}


#: Remote objects of these modules' classes pass isinstance checks against the judge's classes.
TRUSTED_PREFIXES = ("torch.", "numpy.", "builtins.")


def judge_class(type_names: list[str]):
    for name in type_names:
        if not name.startswith(TRUSTED_PREFIXES):
            continue
        # Only classes of modules the judge has already imported; nothing is imported on request.
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = sys.modules.get(".".join(parts[:cut]))
            if module is None:
                continue
            obj = module
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                break
            if isinstance(obj, type):
                return obj
            break
    return None


#: What stands for the message of an error the student's code raised on a hidden test's input.
UNSHOWN = "(its message is not shown for a hidden test: it could repeat the test's inputs)"


def remote_error(err, hidden: bool, hide: frozenset, heard) -> BaseException:
    """The exception the student's code raised, as the test sees it. On a hidden line of the test cell (``hidden``)
    its message is never taken in (whatever the test does with the exception, the page cannot quote it): only given
    to ``heard``, the connection's record of the kernel's texts. ``hide``: the notebook's variables the call was
    made without (:func:`.trust.notebook_globals`)."""
    if not isinstance(err, dict):
        err = {"msg": str(err)}
    read = err.get("global")
    if isinstance(read, str) and read in hide:  # one of the names the judge hid: the course's words alone
        return NameError(f"your code reads the notebook's variable {read} instead of taking what it needs from its "
                         f"arguments: the tests call your functions with the notebook's variables out of reach. Use "
                         f"the arguments' own sizes (X.shape, len(...)) and values, so the function works on any "
                         f"input, not only the notebook's example.")
    name, msg = str(err.get("type", "Error"))[:100], str(err.get("msg", ""))[:2000]
    builtin = err.get("module") == "builtins" and name in _BUILTIN_ERRORS
    if hidden:
        heard(msg, *(() if builtin else (name,)))
        msg = UNSHOWN
    if builtin:
        exc = _BUILTIN_ERRORS[name](msg)
    elif name == "KeyboardInterrupt":
        return KernelTimeout("the student's code took too long and was interrupted")
    else:  # a class of the student's own (its name is the student's text too)
        exc = StudentError(msg if hidden else f"{name}: {msg}" if msg else name)
    exc.from_kernel = True  # raised by the student's code, not by the judge's own work
    return exc

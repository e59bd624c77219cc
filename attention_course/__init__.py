"""Helpers for the *Attention from Scratch* notebooks.

Students import from here: tolerance and shape checks whose messages explain
what went wrong, attention-map plots, and small seeded data generators.
Nothing in this package computes an exercise's answer.

Instructor tooling (nbgrader extensions, the demo class, grade tables) lives in
:mod:`attention_course.grading`, which students never need to import.
"""

from importlib import import_module

from attention_course._notebook import install as _install

#: What students import from here, by the module that defines it. Imported when first asked for, so that
#: importing the package (the grader's sandbox launcher and fork server do) starts no NumPy or PyTorch threads.
_EXPORTS = {"assert_close": "checks", "check_shape": "checks", "check_sums_to_one": "checks",
            "check_unchanged": "checks", "call_unchanged": "checks", "gradients": "checks", "to_numpy": "checks",
            "projection_params": "data", "toy_msa": "data", "toy_sentence": "data",
            "describe": "plotting", "description": "plotting", "plot_attention": "plotting", "plot_matrices": "plotting", "show": "plotting"}

_install()  # in a notebook, a failed check's traceback ends at the student's code (see _notebook.py)

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'attention_course' has no attribute {name!r}")
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))

"""Helpers for the *Attention from Scratch* notebooks.

Students import from here: tolerance and shape checks whose messages explain
what went wrong, attention-map plots, and small seeded data generators.
Nothing in this package computes an exercise's answer.

Instructor tooling (nbgrader extensions, the demo class, grade tables) lives in
:mod:`attention_course.grading`, which students never need to import.
"""

from .checks import (
    assert_close,
    check_shape,
    check_sums_to_one,
    check_unchanged,
    gradients,
    to_numpy,
)
from .data import projection_params, toy_msa, toy_sentence
from .plotting import plot_attention, plot_matrices
from ._notebook import install as _install

_install()  # in a notebook, a failed check's traceback ends at the student's code (see _notebook.py)

__all__ = [
    "assert_close",
    "check_shape",
    "check_sums_to_one",
    "check_unchanged",
    "gradients",
    "plot_attention",
    "plot_matrices",
    "projection_params",
    "toy_msa",
    "toy_sentence",
    "to_numpy",
]

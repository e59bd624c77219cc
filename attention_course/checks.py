"""Checks used by the visible and hidden tests of every assignment.

Every check raises ``AssertionError`` with a message meant to be read by a
student: which object is wrong, its shape, the tolerance used, how large the
largest error is and where, and, when the wrong value matches a known
misconception, the name of that misconception. No message prints the
expected values themselves.
"""

from __future__ import annotations

import inspect
import json
import os
from typing import Mapping, Sequence

import numpy as np

#: Default tolerances: loose enough for float32 PyTorch answers, tight enough
#: that every conceptual mistake in the course is many orders of magnitude off.
RTOL = 1e-4
ATOL = 1e-5


def to_numpy(x, name: str = "value") -> np.ndarray:
    """Return ``x`` as a float64 NumPy array.

    Accepts NumPy arrays, PyTorch tensors (on any device, with or without
    gradients), Python numbers and nested lists.
    """
    if x is None:
        raise AssertionError(
            f"{name} is None: did you forget a `return` statement, or leave a stub in place?"
        )
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch.Tensor, without importing torch
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise AssertionError(
            f"{name} should be an array of numbers, got {type(x).__name__} ({exc})"
        ) from None
    return arr


#: For the course's own tests: when this environment variable names a file, every expected value a check
#: compares against is appended to it (one JSON list per call), so that a test can prove that no feedback
#: message prints a value it was graded against.
EXPECTED_LOG = "ATTENTION_COURSE_EXPECTED_LOG"


def _log_expected(expected: np.ndarray) -> None:
    path = os.environ.get(EXPECTED_LOG)
    if path:
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps([float(v) for v in expected.ravel()[:5000]]) + "\n")
        except (OSError, ValueError):
            pass


def check_shape(x, shape: Sequence[int], name: str = "value", hint: str = "") -> None:
    """Assert that ``x`` has exactly ``shape``.

    Like every check here it returns ``None``: nbgrader would read a value left
    as the last expression of a grade cell as partial credit.
    """
    arr = to_numpy(x, name)
    if tuple(arr.shape) != tuple(shape):
        msg = f"{name} has shape {tuple(arr.shape)}, expected {tuple(shape)}."
        if hint:
            msg += f" {hint}"
        raise AssertionError(msg)


def _matches(actual: np.ndarray, other, rtol: float, atol: float) -> bool:
    other = to_numpy(other, "mistake")
    return other.shape == actual.shape and bool(
        np.allclose(actual, other, rtol=rtol, atol=atol, equal_nan=False)
    )


def assert_close(
    actual,
    expected,
    name: str = "value",
    *,
    rtol: float = RTOL,
    atol: float = ATOL,
    hint: str = "",
    mistakes: Mapping[str, object] | None = None,
) -> None:
    """Assert that ``actual`` equals ``expected`` within ``rtol`` and ``atol``.

    ``mistakes`` maps a description of a misconception to the value that
    misconception would produce; if ``actual`` matches one of them, the
    message names it. ``hint`` is added when no known mistake matches.
    """
    expected = to_numpy(expected, "expected")
    _log_expected(expected)
    arr = to_numpy(actual, name)
    known = dict(mistakes or {})

    def diagnosis(wrong=None) -> str:
        for description, value in known.items():
            if _matches(arr, value, rtol, atol):
                return f" Your result matches a common mistake: {description}."
        if hint:
            return f" {hint}"
        return f" {_where(wrong)}" if wrong is not None and arr.ndim > 1 else ""

    if arr.shape != expected.shape:
        raise AssertionError(
            f"{name} has shape {arr.shape}, expected {expected.shape}." + diagnosis()
        )
    bad = ~np.isfinite(arr)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{name} contains {int(bad.sum())} NaN or infinite entries (first at index {where}). "
            "Look for an overflowing exp(), a division by zero, or a row where every score is -inf."
            + diagnosis()
        )
    err = np.abs(arr - expected)
    limit = atol + rtol * np.abs(expected)
    wrong = err > limit
    if wrong.any():
        worst = np.unravel_index(int(np.argmax(err - limit)), err.shape)
        worst = tuple(int(i) for i in worst)
        raise AssertionError(
            f"{name}: {int(wrong.sum())} of {wrong.size} entries differ beyond the tolerance "
            f"(rtol={rtol:g}, atol={atol:g}); the largest absolute error is {float(err[worst]):.3g} "
            f"at index {worst}." + diagnosis(wrong)
        )


def _where(wrong: np.ndarray) -> str:
    """Where the wrong entries of an array sit, axis by axis (what a check that knows no cause can say): which
    slices hold them, so a wrong head, row or batch element shows, and whether they are everywhere."""
    parts = []
    for axis, size in enumerate(wrong.shape):
        others = tuple(a for a in range(wrong.ndim) if a != axis)
        hit = np.flatnonzero(wrong.any(axis=others))
        if len(hit) == size:
            parts.append(f"every index of axis {axis}")
        else:
            shown = ", ".join(str(int(i)) for i in hit[:8]) + (", ..." if len(hit) > 8 else "")
            parts.append(f"{len(hit)} of the {size} indices of axis {axis} ({shown})")
    return ("No common mistake matches; the entries that differ lie in " + "; ".join(parts)
            + ". Check the step that makes those slices.")


def check_sums_to_one(weights, axis: int, name: str = "attention weights", *, atol: float = 1e-5,
                      hint: str = "") -> None:
    """Assert that ``weights`` are non-negative and sum to 1 along ``axis``."""
    arr = to_numpy(weights, name)
    if arr.ndim == 0:
        raise AssertionError(f"{name} should be an array, got a single number.")
    if not np.isfinite(arr).all():
        raise AssertionError(f"{name} contains NaN or infinite entries.")
    if (arr < -atol).any():
        raise AssertionError(f"{name} has negative entries: softmax outputs are never negative.")
    sums = arr.sum(axis=axis)
    err = np.abs(sums - 1.0)
    if (err > atol).any():
        other = [a for a in range(arr.ndim) if a != axis % arr.ndim]
        msg = (
            f"{name} of shape {arr.shape} should sum to 1 along axis {axis}; the worst sum is off by "
            f"{float(err.max()):.3g}."
        )
        if other and np.allclose(arr.sum(axis=other[-1]), 1.0, atol=atol):
            msg += f" They sum to 1 along axis {other[-1]} instead: is the softmax taken over the wrong axis?"
        if hint:
            msg += f" {hint}"
        raise AssertionError(msg)


def check_unchanged(before, after, name: str = "input") -> None:
    """Assert that a function did not modify its input in place.

    In your own kernel (and under Validate) it compares the array you passed with its copy from before the call.
    At autograde, arguments reach your code as copies, so the test's own array never changes and this passes; the
    grader notes a change your kernel reports, in the feedback, without taking points for it."""
    b, a = to_numpy(before, name), to_numpy(after, name)
    nan = b.dtype.kind in "fc" and a.dtype.kind in "fc"  # a NaN left where it was is unchanged (NaN != NaN)
    if b.shape != a.shape or not np.array_equal(b, a, equal_nan=nan):
        raise AssertionError(
            f"{name} was modified in place. Work on new arrays (`S = Q @ K.T / c`, not `Q /= c`; `X = X + b`, not "
            "`X += b`)."
        )


def call_unchanged(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, after which every array or tensor argument must be as it was; returns what ``fn``
    returned. A visible check calls a function this way when it reads the arguments again afterwards (for its
    reference), so that a function that changes its caller's arrays is named as one instead of failing on values.
    At autograde, where ``fn`` lives in the student's kernel, arguments reach it as copies: this is a plain call,
    and the grader notes a change the kernel reports (see :func:`check_unchanged`)."""
    if _in_kernel(fn):
        return fn(*args, **kwargs)

    try:
        named = list(inspect.signature(fn).bind(*args, **kwargs).arguments.items())
    except (TypeError, ValueError):
        named = [(f"argument {i + 1}", a) for i, a in enumerate(args)] + list(kwargs.items())
    before = [(name, value, _snapshot(value)) for name, value in named]
    result = fn(*args, **kwargs)
    for name, value, copy in before:
        for where, was, now in _held(copy, value, f"the caller's {name}"):
            check_unchanged(was, now, where)
    return result


def _in_kernel(fn) -> bool:
    """Whether ``fn`` is a student's function seen from the grader's judge (it lives in the student's kernel)."""
    return getattr(type(fn), "_judge_vjp", None) is not None


def _snapshot(value, depth: int = 0):
    """A copy of a NumPy array or a PyTorch tensor, and of the ones a list, tuple or dict holds (a head's
    parameters, a list of heads); None for anything else."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if hasattr(value, "detach") and hasattr(value, "clone"):
        return value.detach().clone()
    if depth < 3 and isinstance(value, (list, tuple)):
        return [_snapshot(v, depth + 1) for v in value]
    if depth < 3 and isinstance(value, dict):
        return {k: _snapshot(v, depth + 1) for k, v in value.items()}
    return None


def _held(copy, value, name: str):
    """``(name, copy, now)`` for every array :func:`_snapshot` copied from ``value``, named as the caller would
    (``the caller's heads[1]['W_q']``). A container the function emptied or filled is named as changed too."""
    if copy is None:
        return
    if isinstance(copy, list):
        if not isinstance(value, (list, tuple)) or len(value) != len(copy):
            raise AssertionError(f"{name} was modified in place (its length changed). Work on new lists and arrays.")
        for i, (c, v) in enumerate(zip(copy, value)):
            yield from _held(c, v, f"{name}[{i}]")
    elif isinstance(copy, dict):
        if not isinstance(value, dict) or set(value) != set(copy):
            raise AssertionError(f"{name} was modified in place (its keys changed). Work on new dicts and arrays.")
        for k, c in copy.items():
            yield from _held(c, value[k], f"{name}[{k!r}]")
    else:
        yield name, copy, value


def gradients(fn, args: tuple, cotangents, **kwargs):
    """Run ``fn(*args, **kwargs)`` and differentiate it.

    Returns ``(outputs, grads)``: the function's outputs, and the gradients of
    ``sum_i (outputs[i] * cotangents[i]).sum()`` with respect to every tensor among
    ``args`` and ``kwargs`` that requires grad, in order (``None`` where unused).
    At autograde, when ``fn`` is a student's function living in another process,
    the differentiation happens there.
    """
    if _in_kernel(fn):
        return fn._judge_vjp(args, kwargs, cotangents)
    import torch

    def tensors(x):
        if isinstance(x, torch.Tensor):
            return [x]
        if isinstance(x, (list, tuple)):
            return [t for i in x for t in tensors(i)]
        if isinstance(x, dict):
            return [t for i in x.values() for t in tensors(i)]
        return []

    with torch.enable_grad():
        outputs = fn(*args, **kwargs)
        outs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        inputs = [t for t in tensors((args, kwargs)) if t.requires_grad]
        pairs = [(o, c) for o, c in zip(outs, cotangents) if isinstance(o, torch.Tensor) and o.requires_grad]
        if not pairs or not inputs:
            return outputs, [None] * len(inputs)
        grads = torch.autograd.grad([o for o, _ in pairs], inputs, allow_unused=True,
                                    grad_outputs=[torch.as_tensor(c, dtype=o.dtype) for o, c in pairs])
    return outputs, list(grads)

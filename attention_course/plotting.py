"""Plots used across the course: attention maps and side-by-side matrices, and :func:`show`, which shows a
figure with a text alternative that says what it shows (read by screen readers in every page the course makes).

The plotting helpers describe what they draw (:func:`describe`); ``show()`` shows a figure with those
descriptions, or with the ``alt`` text it is given, and refuses a figure that has neither.
"""

from __future__ import annotations

import weakref
from typing import Sequence

import numpy as np

from attention_course.checks import to_numpy

#: figure -> the descriptions of what the helpers drew on it, in order
_DESCRIPTIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def describe(fig, text: str) -> None:
    """Add ``text`` to the description of ``fig`` (what it shows, with its key numbers)."""
    _DESCRIPTIONS.setdefault(fig, []).append(text.strip())


def description(fig) -> str:
    """What the helpers said ``fig`` shows ("" if nothing drew on it through them)."""
    return " ".join(_DESCRIPTIONS.get(fig, []))


def show(alt: str | None = None, fig=None) -> None:
    """Show ``fig`` (by default the current figure) with a text alternative, and close it.

    ``alt`` says what the figure shows, with its key numbers ("Peak memory against L: full attention grows
    from 0.1 to 32 MiB, ..."); without it, the descriptions of the helpers that drew it are used
    (:func:`plot_attention`, :func:`plot_matrices`). A figure with neither is refused: every figure of the
    course can be read without seeing it. Outside a notebook this is ``plt.show()``.
    """
    import matplotlib.pyplot as plt

    fig = plt.gcf() if fig is None else fig
    text = " ".join((alt or description(fig)).split())
    if not text:
        raise ValueError("show() needs a text alternative for this figure: show(alt='what it shows, with its "
                         "key numbers'), or draw it with plot_attention / plot_matrices, which describe it")
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with every kernel
        get_ipython = lambda: None  # noqa: E731
    if get_ipython() is None:
        plt.show()
        return
    from IPython.display import display

    display(fig, metadata={"image/png": {"alt": text}})
    plt.close(fig)


def _fmt(value: float) -> str:
    return f"{value:.2f}"


def _attention_text(w: np.ndarray, title: str, queries, keys) -> str:
    n_q, n_k = w.shape
    q_names = list(queries) if queries is not None else [str(i) for i in range(n_q)]
    k_names = list(keys) if keys is not None else [str(j) for j in range(n_k)]
    best = w.argmax(axis=1)
    text = f"Heatmap '{title}': attention weights of {n_q} queries (rows) over {n_k} keys (columns), 0 to 1."
    if n_q <= 8:
        picks = "; ".join(f"{q_names[i]} -> {k_names[best[i]]} {_fmt(w[i, best[i]])}" for i in range(n_q))
        return f"{text} Each query's largest weight: {picks}."
    i, j = np.unravel_index(np.argmax(w), w.shape)
    return (f"{text} Largest weight {_fmt(w[i, j])} (query {q_names[i]}, key {k_names[j]}); the largest weight "
            f"of a row is {_fmt(w.max(axis=1).mean())} on average, the smallest weight {_fmt(w.min())}.")


def plot_attention(weights, queries: Sequence[str] | None = None, keys: Sequence[str] | None = None,
                   *, title: str = "Attention weights", ax=None, annotate: bool | None = None,
                   cmap: str = "viridis"):
    """Draw an attention matrix as a heatmap, queries down the side, keys along the top.

    ``weights`` is ``[n_queries, n_keys]`` (row convention: each row sums to 1).
    For the column convention of the Understanding Deep Learning book
    (``[n_keys, n_queries]``, columns summing to 1) pass ``weights.T``.
    Values are annotated when the matrix is small (at most 12 x 12) unless
    ``annotate`` says otherwise. Returns the matplotlib ``Axes``.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    w = to_numpy(weights, "weights")
    if w.ndim != 2:
        raise ValueError(f"plot_attention draws one [queries, keys] matrix; got shape {w.shape}")
    n_q, n_k = w.shape
    if annotate is None:
        annotate = max(n_q, n_k) <= 12
    if ax is None:
        size = min(10.0, 2.0 + 0.45 * max(n_q, n_k))
        _, ax = plt.subplots(figsize=(size, size * 0.85))
    sns.heatmap(
        w, ax=ax, cmap=cmap, vmin=0.0, vmax=1.0, square=True,
        annot=annotate, fmt=".2f", annot_kws={"fontsize": 8},
        xticklabels=list(keys) if keys is not None else "auto",
        yticklabels=list(queries) if queries is not None else "auto",
        cbar_kws={"label": "weight"},
    )
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    describe(ax.figure, _attention_text(w, title, queries, keys))
    return ax


def plot_matrices(matrices: dict, *, cmap: str = "RdBu_r", symmetric: bool = True, ncols: int | None = None,
                  figsize_per: float = 3.2):
    """Show several matrices side by side, one titled panel each.

    ``matrices`` maps a title to a 2-D array (NumPy or PyTorch). With
    ``symmetric`` the colour scale of each panel is centred on zero.
    Returns the matplotlib ``Figure``.
    """
    import matplotlib.pyplot as plt

    items = [(title, to_numpy(m, title)) for title, m in matrices.items()]
    if not items:
        raise ValueError("plot_matrices needs at least one matrix")
    ncols = ncols or len(items)
    nrows = int(np.ceil(len(items) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(figsize_per * ncols, figsize_per * nrows), squeeze=False)
    for ax in axes.flat[len(items):]:
        ax.axis("off")
    for ax, (title, m) in zip(axes.flat, items):
        m = np.atleast_2d(m)
        if symmetric:
            lim = float(np.abs(m).max()) or 1.0
            im = ax.imshow(m, cmap=cmap, vmin=-lim, vmax=lim)
        else:
            im = ax.imshow(m, cmap=cmap)
        ax.set_title(f"{title}\n{tuple(m.shape)}", fontsize=10)
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    parts = "; ".join(f"{title} {' x '.join(map(str, np.atleast_2d(m).shape))} from {_fmt(np.min(m))} to "
                      f"{_fmt(np.max(m))}" for title, m in items)
    describe(fig, f"{len(items)} matrices drawn as heatmaps side by side: {parts}.")
    return fig

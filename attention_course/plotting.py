"""Plots used across the course: attention maps and side-by-side matrices."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .checks import to_numpy


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
    return fig

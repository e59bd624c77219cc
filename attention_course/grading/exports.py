"""A sub-package's public names, imported when first used.

Each sub-package's ``__init__`` says its job and lists the names other packages use, and the module of each
(:func:`lazy`). Nothing is imported until a name is asked for: the agent in a student's kernel imports
``judging.agent`` without the judge, and the sandbox's launcher ``kernels.sandbox`` without the kernels' pool.
"""

from __future__ import annotations

import importlib


def lazy(package: str, names: dict[str, str]):
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose public name ``n`` is ``package.<names[n]>.n``."""

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{names[name]}"), name)

    def __dir__():
        return sorted(names)

    return __getattr__, __dir__

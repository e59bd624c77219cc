"""Where a hand-in's code runs: one sandboxed IPython kernel per notebook.

:mod:`.kernel` starts and talks to a student's kernel, forked from a process that has imported the heavy libraries
already (:mod:`.forkserver`), confined by :mod:`.sandbox` (namespaces, Landlock, seccomp, limits) in a root of its own
(:mod:`.rootfs`) and a cgroup where the host delegates one (:mod:`.cgroups`), in scratch folders removed even when
their maker is killed (:mod:`.scratch`). :mod:`.kernel_io` is the grader's side of the kernel's messages and the caps
on what a notebook keeps; :mod:`.clock` the time a limit charges (what a hand-in's processes had of the machine).
"""

from ..exports import lazy

#: Each public name and the module that defines it.
EXPORTS = {
    "Kernel": "kernel",
    "Budget": "kernel_io",
    "Cell": "kernel_io",
    "MAX_MESSAGE_BYTES": "kernel_io",
    "MAX_NOTEBOOK_OUTPUT_BYTES": "kernel_io",
    "MAX_OUTPUT_BYTES": "kernel_io",
    "NOTE": "kernel_io",
    "OVERFLOW": "kernel_io",
    "landlock_abi": "sandbox",
}
__all__ = sorted(EXPORTS)
__getattr__, __dir__ = lazy(__name__, EXPORTS)

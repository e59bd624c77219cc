"""Judging a hand-in: test cells run in the grader, never in the student's kernel.

nbgrader's ``Execute`` step is replaced by :class:`.executor.JudgedExecute` (:mod:`.executor`): it runs the
student's cells in her sandboxed kernel and each test cell in the judge (:mod:`.judge`, in a process of its own: :mod:`.judgeproc`), which
asks the course's agent in the kernel (:mod:`.agent`) to call the student's functions (what goes wrong there:
:mod:`.failures`), over a wire that carries data
and never code (:mod:`.wire`). :mod:`.cells` reads a cell's text: the course's block markers, the names it binds.
"""

from ..exports import lazy

#: Each public name and the module that defines it.
EXPORTS = {
    "Agent": "agent",
    "EnvironmentFault": "executor",
    "JudgedExecute": "executor",
    "GradingInterrupt": "failures",
    "KernelGone": "failures",
    "KernelTimeout": "failures",
    "StudentError": "failures",
    "remote_error": "failures",
    "Connection": "judge",
    "Judge": "judge",
    "JudgeProcess": "judgeproc",
    "outcome": "judgeproc",
    "serve": "judgeproc",
}
__all__ = sorted(EXPORTS)
__getattr__, __dir__ = lazy(__name__, EXPORTS)

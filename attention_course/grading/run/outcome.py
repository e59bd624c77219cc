"""What grading one hand-in came to, wherever it was graded: :class:`Outcome`.

Every grading path returns one: a local grading process of the course command (:func:`.worker.grade_one`, which
writes the gradebook itself), and a worker that grades in a scratch course of its own and returns the executed
notebooks for the gradebook's one writer to record (:func:`.cluster.grade_on_worker`: a Dask worker, or a worker of
the grading service). Its :attr:`~Outcome.status` says whose a failure is, decided by where it happened, never by
an error's text.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .progress import failure_cause

#: Graded: its scores are in the gradebook (or its notebooks are ready to be recorded there).
GRADED = "graded"
#: Not graded, the hand-in's own problem: a notebook of it cannot be read, a file cannot be written here.
HANDIN = "handin"
#: Not graded, the grader's problem (an :class:`.executor.EnvironmentFault`, a worker that died): never the
#: student's; the grading service tries it again.
GRADER = "grader"
#: Not graded for another reason, shown to the instructor with its cause.
FAILED = "failed"


@dataclass
class Outcome:
    assignment: str
    student: str
    status: str
    log: str = ""                # nbgrader's log lines an instructor should see
    error: str = ""              # the error nbgrader or the worker gave, when not graded
    seconds: float = 0.0         # the worker's time for it
    worker: str = ""             # where it was graded, when not here
    notebooks: dict = field(default_factory=dict)   # name -> executed notebook (JSON), for the recording pass
    unreadable: list = field(default_factory=list)  # the hand-in's notebooks nbformat cannot read (HANDIN)
    faults: list = field(default_factory=list)      # the environment faults raised while grading it (GRADER)

    @property
    def success(self) -> bool:
        return self.status == GRADED

    def cause(self) -> str:
        """Why it was not graded, in one line (:func:`.progress.failure_cause`)."""
        return failure_cause({"log": self.log, "error": self.error})

    def recorded(self, result: dict, seconds: float) -> Outcome:
        """This outcome after the gradebook's writer recorded its notebooks with nbgrader (``result``: nbgrader's
        ``autograde`` answer), ``seconds`` later."""
        return replace(self, status=GRADED if result.get("success") else FAILED, log=self.log + result.get("log", ""),
                       error=result.get("error", ""), seconds=self.seconds + seconds)


def not_graded(assignment: str, student: str, status: str, error: str, **more) -> Outcome:
    return Outcome(assignment, student, status, error=error, **more)

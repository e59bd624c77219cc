"""Feedback at submit: the grading service that grades each hand-in as it comes.

:mod:`.main` starts it (``make serve``) and asks it to reload; :mod:`.loop` is the service; :mod:`.scan` looks at
the exchange, :mod:`.queue` keeps every hand-in it has seen, :mod:`.workers` grades them (local processes or Dask),
:mod:`.pages` writes what a student sees before grading, :mod:`.settings` reads the course's settings again when they
change, :mod:`.log` is the instructor's log.
"""

from ..exports import lazy

#: Each public name and the module that defines it.
EXPORTS = {
    "ask_reload": "main",
    "Service": "loop",
    "notice_page": "pages",
    "when": "pages",
    "FINAL": "queue",
    "Queue": "queue",
    "SETTLE_S": "queue",
    "settled": "queue",
    "PER_STUDENT": "scan",
    "Scan": "scan",
    "drop_pool": "workers",
}
__all__ = sorted(EXPORTS)
__getattr__, __dir__ = lazy(__name__, EXPORTS)

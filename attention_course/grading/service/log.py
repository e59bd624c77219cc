"""The grading service's log in the course folder (``service.log``): the instructor's to read, wherever the service
runs (on JupyterHub its output goes to the hub's log, which is root's alone).

Each line is one line of ASCII: the time, then what the service said, names from the exchange (a student's folder
names) with control characters and everything outside ASCII escaped (``\\x0a``, ``\\u2028``), so that nothing a
student names can start a line of its own. Each hand-in's outcome is one line that starts ``Hand-in:`` (student,
assignment, when it came, what became of it: :func:`outcome`). The file is the service's user's alone (0600, opened
without following a link, refused when it is not a regular file of that user), and capped: past :data:`CAP` bytes it
becomes ``service.log.1`` (the one before is dropped) and a new one starts, so that the two never hold more than
twice the cap.
"""

from __future__ import annotations

import os
import stat
import sys
from datetime import datetime, timezone
from pathlib import Path

from ..trust import display_name

NAME = "service.log"
#: The size at which the log starts again (its last part kept as ``service.log.1``).
CAP = 5 * 2**20


def one_line(text: str) -> str:
    """``text`` as one line of ASCII (control characters and every non-ASCII character escaped)."""
    return display_name(text).encode("ascii", "backslashreplace").decode("ascii")


def moment(seconds: float) -> str:
    """A time as the log writes it: the server's local time with its zone."""
    return datetime.fromtimestamp(seconds, timezone.utc).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def outcome(student: str, assignment: str, came: float, what: str) -> str:
    """One hand-in's outcome, as its log line says it (``what``: "graded 45 / 50", "waiting ...", "replaced ...",
    "late: ...", "not taken: ...", "NOT GRADED: ...")."""
    return f"Hand-in: {student}, {assignment}, handed in {moment(came)}: {what}"


class ServiceLog:
    """Appends lines to ``path`` (see the module's docstring); a file it cannot write is said once on stderr and the
    service goes on (its output still has every line)."""

    def __init__(self, path: Path, cap: int = CAP):
        self.path, self.cap, self.fd, self.failed = Path(path), cap, None, ""

    def _open(self) -> int:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            os.close(fd)
            raise PermissionError(f"{self.path} is not a file of this user's: not written")
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.fchmod(fd, 0o600)  # the instructor's: nobody else reads or writes it
        return fd

    def write(self, text: str) -> None:
        line = f"[{datetime.now().astimezone():%Y-%m-%d %H:%M:%S}] {one_line(text)}\n".encode("ascii")
        try:
            if self.fd is None:
                self.fd = self._open()
            if os.fstat(self.fd).st_size + len(line) > self.cap:
                os.close(self.fd)
                self.fd = None
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                self.fd = self._open()
            os.write(self.fd, line)
        except OSError as exc:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None
            if str(exc) != self.failed:  # said once, again only when the cause changes
                self.failed = str(exc)
                sys.stderr.write(f"The grading service cannot write its log {self.path}: {exc}\n")

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

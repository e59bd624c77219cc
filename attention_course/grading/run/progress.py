"""What a run shows as it goes: the progress line, and what of nbgrader's log an instructor sees (warnings, errors,
a traceback as its cause in one line)."""

from __future__ import annotations

import os
import re
import sys
import textwrap
import time


# -- progress ----------------------------------------------------------------------------
class Progress:
    """done / total, rate and ETA on one line (a terminal) or one line per submission (a log)."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream
        self.start, self.tty = time.monotonic(), stream.isatty()

    def line(self) -> str:
        elapsed = time.monotonic() - self.start
        rate = self.done / elapsed if elapsed > 0 and self.done else 0.0
        eta = (self.total - self.done) / rate if rate else None
        filled = int(24 * self.done / self.total) if self.total else 24
        bar = "#" * filled + "." * (24 - filled)  # 24 characters wide
        eta_text = "--:--" if eta is None else f"{int(eta) // 60:02d}:{int(eta) % 60:02d}"
        return (f"[{bar}] {self.done}/{self.total}  {rate:.2f} submissions/s  elapsed "
                f"{int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}  ETA {eta_text}")

    def note(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text.rstrip("\n") + "\n")
        self.show()

    def advance(self, label: str) -> None:
        self.done += 1
        if self.tty:
            self.show()
        else:
            self.stream.write(f"{self.line()}  {label}\n")
            self.stream.flush()

    def show(self) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self.line())
            self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


#: nbgrader's own words around a failed hand-in's traceback (they name no cause).
_GENERIC = ("There was an error processing assignment", "Please see the")


_RECORD = re.compile(r"\[(DEBUG|INFO|WARNING|ERROR|CRITICAL)\] ")


_WHERE = re.compile(r'\s*File "([^"]+)", line (\d+), in (.+)')


def traceback_cause(lines: list[str]) -> str:
    """A traceback's last line (the exception) and where it was raised, as one line."""
    text = [line for line in textwrap.dedent("\n".join(lines)).splitlines() if line.strip()]
    where = [m for line in text if (m := _WHERE.match(line))]
    exception = next((line.strip() for line in reversed(text) if not line.startswith(" ")), "")
    exception = re.sub(r"^(?:\w+\.)+(?=\w+(?::|$))", "", exception)  # EnvironmentFault, not its module's path
    place = f" (at {os.path.basename(where[-1].group(1))}:{where[-1].group(2)} in {where[-1].group(3)})" if where else ""
    return (exception or "an error without a message") + place


def notable_lines(log: str) -> list[str]:
    """The log lines an instructor should see (warnings and errors), without nbgrader's own noise; a traceback is
    one line: its exception and where it was raised."""
    keep, lines, i = [], log.splitlines(), 0
    while i < len(lines):
        line, i = lines[i], i + 1
        body = []
        while i < len(lines) and not _RECORD.match(lines[i]):  # the record's further lines
            body.append(lines[i])
            i += 1
        if not line.startswith(("[WARNING]", "[ERROR]", "[CRITICAL]")) or "SAWarning" in line \
                or "Removing existing assignment" in line or "Removing failed assignment" in line \
                or line.split("] ", 1)[-1].startswith(_GENERIC):  # nbgrader's words around a failure: the cause says it
            continue
        if "Traceback (most recent call last)" in line:
            line = f"{line.split(']', 1)[0]}] {traceback_cause(body)}"
        keep.append(line)
    return keep


def failure_cause(result: dict) -> str:
    """Why a hand-in was not graded, in one line: the exception its grading raised and where, or the last error."""
    errors = [line.split("] ", 1)[1] for line in notable_lines(result.get("log", "") or "")
              if line.startswith(("[ERROR]", "[CRITICAL]"))]
    if errors:
        return errors[-1]
    error = (result.get("error") or "").strip().splitlines()
    if any("Traceback (most recent call last)" in line for line in error):
        return traceback_cause(error)
    return error[-1] if error else "see the messages above"

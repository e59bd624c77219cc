"""Starting the grading service and asking it to read its settings again: ``make serve`` (:func:`main`) and
``make serve-reload`` (:func:`ask_reload`). One service per course (:func:`one_service`, a lock in its folder); its
log goes to its output and to ``service.log`` in the course folder (:mod:`.log`); settings that do not load
when it starts keep it waiting until they are mended (:mod:`.settings`)."""

from __future__ import annotations

import fcntl
import json
import secrets
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

from .. import trust
from ..course import STATE_DIR
from ..errors import CourseError
from .log import NAME as LOG_NAME
from .log import ServiceLog
from .loop import Service
from .queue import one_service
from .settings import ANSWER, CONFIG, REQUEST, SettingsError, Watched, answer, load, take_request, write_json


def main(course: Path, workers: int | None, scheduler: str | None, accept: set[str], once: bool) -> int:
    """``make serve``: the course's one service, its log in the course folder as well as on its output. Settings that
    do not load when it starts keep it waiting (said in its log) until one of the files changes, or, with ``once``,
    stop it."""
    stopping = []

    def stop(*_):
        stopping.append(1)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    course = Path(course).resolve()
    folder = course / STATE_DIR
    lock = one_service(folder)
    written = ServiceLog(course / LOG_NAME)

    def log(text: str) -> None:
        print(f"[{datetime.now():%H:%M:%S}] {trust.display_name(text)}", flush=True)
        written.write(text)

    try:
        settings, said = None, ""
        while settings is None:
            watched = Watched.of([course / CONFIG, course / "extensions.csv"])
            token = take_request(folder)
            try:
                settings = load(course)
            except SettingsError as exc:
                message = (f"Not started: {exc}. The service starts when nbgrader_config.py or extensions.csv is "
                           "mended and saved.")
                answer(folder, token, False, message)
                if message != said:
                    log(message)
                    said = message
                if once:
                    return 1
                while not stopping and not watched.changed() and not (folder / REQUEST).exists():
                    time.sleep(1)
                if stopping:
                    return 0
            else:
                answer(folder, token, True, "Settings loaded: the service starts with them: " + "; ".join(
                    f"{key} {value}" for key, value in settings.summary().items()))
        service = Service(course, workers, scheduler, accept, log=log, settings=settings, lock=lock)
        counts = service.serve(once=once, stop=lambda: bool(stopping))
        service.log("Stopped; the queue: " + ", ".join(f"{state} {n}" for state, n in sorted(counts.items())))
        return 0
    finally:
        written.close()


def running(folder: Path) -> bool:
    """Whether a grading service holds the course's lock (``<folder>/service.lock``)."""
    try:
        handle = open(folder / "service.lock", "r")
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def ask_reload(course: Path, timeout: float = 120.0, out=print) -> int:
    """``make serve-reload``: ask the course's running service to read its settings now; print its answer. 0 when it
    took them, 1 when it kept its old ones (the answer says why) or no service runs or none answered."""
    folder = Path(course) / STATE_DIR
    if not running(folder):
        out("No grading service runs for this course: the next one reads nbgrader_config.py and extensions.csv when "
            "it starts (make serve; on JupyterHub the hub starts it again within seconds when it stops).")
        try:
            settings = load(course)
        except SettingsError as exc:
            out(f"As they are now, they would not load: {exc}")
        else:
            out("As they are now, they load: " + "; ".join(f"{k} {v}" for k, v in settings.summary().items()))
        return 1
    token = secrets.token_hex(8)
    write_json(folder / REQUEST, {"token": token})
    deadline, said = time.monotonic() + timeout, False
    while time.monotonic() < deadline:
        try:
            reply = json.loads((folder / ANSWER).read_text())
        except (OSError, ValueError):
            reply = {}
        if reply.get("token") == token:
            out(reply.get("message", ""))
            return 0 if reply.get("ok") else 1
        if not said and time.monotonic() > deadline - timeout + 5:
            out("Waiting for the grading service (it reads its settings between two hand-ins) ...")
            said = True
        time.sleep(0.2)
    out(f"The grading service did not answer in {timeout:.0f} s (busy recording a grade?): it reads the settings "
        "when it is free, and says so in service.log.")
    return 1


if __name__ == "__main__":  # the course command's ``serve`` is the usual way in; this one starts in the folder
    try:
        sys.exit(main(Path.cwd(), None, None, set(), False))
    except CourseError as exc:
        sys.exit(str(exc))

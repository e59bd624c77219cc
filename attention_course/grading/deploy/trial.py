"""``make hub``: a trial class on this machine, started and stopped (``python -m attention_course.grading.deploy.trial``).

Its users, exchange and hub come from :mod:`.hub`; what the instructor did is kept when it stops (:mod:`.hub_trial`).
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from ..errors import CourseError
from .hub import ENV_PREFIX, new_class, remove_class, shared_env, start_hub, stop_hub


def main(argv: list[str] | None = None) -> int:
    """``make hub``; a problem of the course's set-up (:class:`.errors.CourseError`) is printed, not a traceback."""
    try:
        return trial(argv)
    except CourseError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code


def trial(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make hub", description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=2, help="how many students (default 2)")
    parser.add_argument("--port", type=int, default=8000, help="the hub's port on 127.0.0.1 (default 8000)")
    parser.add_argument("--state", default="/srv/attention-from-scratch-hub", help="the hub's folder")
    parser.add_argument("--env", default=str(ENV_PREFIX), help="the shared environment's folder")
    parser.add_argument("--env-only", action="store_true", help="build or refresh the shared environment, and stop")
    args = parser.parse_args(argv)
    if args.env_only:
        print(f"shared environment: {shared_env(Path(args.env)).parent}")
        return 0
    if os.geteuid() != 0:
        print("make hub makes Unix users and runs JupyterHub, which starts each user's server as that user: "
              "run it as root (sudo make hub)", file=sys.stderr)
        return 2
    tag = secrets.token_hex(2)
    instructor = f"teach{tag}"
    students = [f"stud{tag}{i}" for i in range(1, args.students + 1)]
    klass = new_class(Path(args.state), students, instructor, Path(args.env), args.port)
    proc = None
    try:
        proc = start_hub(klass)
        print(f"\nA class on http://{klass.ip}:{klass.port}/ (loopback only; from another machine: "
              f"ssh -L {klass.port}:127.0.0.1:{klass.port} this-host)\n")
        for name in [instructor, *students]:
            role = "instructor (Formgrader, course folder)" if name == instructor else "student"
            print(f"  {name:<14} password {klass.passwords[name]:<18} {role}")
        print(f"\nThe instructor's course folder: {klass.course}; the exchange: {klass.exchange}."
              "\nRelease an assignment from the Formgrader (or a terminal: nbgrader release_assignment 01_self_attention)."
              "\nHer terminals (JupyterLab: File > New > Terminal; or ssh) run the course's environment: make doctor,"
              "\nmake autograde, make feedback, make grades, nbgrader ..., python -m attention_course.grading ..."
              "\nHer grading service's log: service.log in her course folder; make serve-reload reads its settings now."
              "\nCtrl-C stops the hub and removes these users, their homes and the exchange; the instructor's work"
              f"\n(gradebook, grades, feedback, hand-ins) is copied first into {Path.cwd()}/hub-trial-<date>/.")
        stopping = []
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # Ctrl-C, kill, a closed terminal
            signal.signal(sig, lambda *_: stopping.append(1))
        while proc.poll() is None and not stopping:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        if proc is not None:
            stop_hub(proc)
        remove_class(klass, save_to=Path.cwd())
        print("Stopped; users and their homes removed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

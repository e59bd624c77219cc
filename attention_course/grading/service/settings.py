"""What the grading service reads of the course, and when: ``c.OnSubmit`` and ``c.Term`` of ``nbgrader_config.py``
and the term's extensions CSV (:class:`Settings`, :func:`load`).

The service reads them when it starts, looks at both files on each round (size, modification time, then the content's
hash) and reads them again between hand-ins when their content changed, or when the instructor asks
(``make serve-reload``: :func:`.main.ask_reload` leaves a request in the service's folder, :func:`take_request`
takes it and :func:`answer` answers it). :class:`Reloads` is the service's part that does it. Settings
that do not load (a syntax error, a value of the wrong type, a due date without its zone, an extension row without
days, an assignment on submit that ``source/`` lacks) never stop the service: it keeps those it had and says why in
its log (:mod:`.log`).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from nbgrader.apps.baseapp import NbGrader
from traitlets import TraitError
from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

from ..course import available, exchange_root
from ..errors import ConfigError, CourseError
from ..nbgrader_glue.collect import nbgrader_rules
from ..nbgrader_glue.term import Term
from .queue import OnSubmit

CONFIG = "nbgrader_config.py"
#: The request ``make serve-reload`` leaves in the service's folder, and the service's answer to it.
REQUEST, ANSWER = "reload-request", "reload-answer"


class SettingsError(ConfigError):
    """The course's settings cannot be used as they are: why, in one line."""


def stamp(path: Path) -> tuple | None:
    """What tells a change of ``path``: (size, modification time, inode, change time), or None when it is absent."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def content_hash(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


#: A changed file is read once its content has stayed the same for this long (at two looks at least this far apart,
#: one round of the service each): a file being written (truncated, then written, as most editors and
#: ``Path.write_text`` do) is not read between the two, which would take an empty ``extensions.csv`` for one without
#: extensions. (A writer that stops for longer in the middle can still be read half-way.)
SETTLE_SECONDS = 1.0


@dataclass
class Watched:
    """The files the settings came from, as they were when they were read: their stamps and contents' hashes; and the
    changes not yet settled (:data:`SETTLE_SECONDS`): the new content's hash, and when it was first seen."""

    files: dict[str, tuple[tuple | None, str | None]] = field(default_factory=dict)
    settling: dict[str, tuple[str | None, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, paths: list[Path]) -> Watched:
        return cls({str(p): (stamp(p), content_hash(p)) for p in paths})

    def changed(self, now: float | None = None) -> list[str]:
        """The names of the files whose content changed since (a file touched but unchanged is not), updating the
        stamps of those touched only. A change counts once the new content has stayed the same for
        :data:`SETTLE_SECONDS` (``now``: this look's ``time.monotonic()``)."""
        now = time.monotonic() if now is None else now
        changed = []
        for name, (old_stamp, old_hash) in list(self.files.items()):
            current = stamp(Path(name))
            if current == old_stamp:
                self.settling.pop(name, None)
                continue
            new_hash = content_hash(Path(name))
            if new_hash == old_hash:  # touched, or changed and changed back
                self.files[name] = (current, old_hash)
                self.settling.pop(name, None)
                continue
            first = self.settling.get(name)
            if first is None or first[0] != new_hash:  # new content: read once it has stayed so
                self.settling[name] = (new_hash, now)
            elif now - first[1] >= SETTLE_SECONDS:
                del self.settling[name]
                changed.append(Path(name).name)
        return changed


@dataclass
class Settings:
    """``c.OnSubmit`` (the policy), ``c.Term`` (deadlines and extensions) and the assignments on submit, as loaded
    from the course's files (``watched``)."""

    policy: object                 # queue.OnSubmit
    term: object                   # term.Term, its extensions read
    assignments: list[str]         # on submit, in teaching order
    watched: Watched

    def summary(self) -> dict[str, str]:
        """What the service does with them, item by item, as the log says it."""
        term, policy = self.term, self.policy
        return {
            "on submit": ", ".join(self.assignments) or "nothing",
            "at most one graded hand-in per student and assignment every": f"{policy.minutes_between:g} min",
            "pages before the deadline show": repr(policy.show),
            "the exchange looked at every": f"{policy.poll_seconds:g} s",
            "due dates": "; ".join(f"{a} {d}" for a, d in sorted(term.due.items())) or "none",
            "late penalty": f"{term.late_share_per_day:g} a day, at most {term.late_cap:g}",
            "extensions": f"{len(self.extensions())} in {Path(term.extensions).name}",
        }

    def extensions(self) -> dict[tuple[str, str], timedelta]:
        return dict(getattr(self.term, "_extensions", {}))

    def changes(self, before: Settings) -> list[str]:
        """What differs from ``before``, one item each ("minutes_between: 30 min (was 10 min)"); the extensions that
        were added, changed or removed named (the first five)."""
        old, new = before.summary(), self.summary()
        said = [f"{key}: {new[key]} (was {old[key]})" for key in new if new[key] != old[key] and key != "extensions"]
        was, now = before.extensions(), self.extensions()
        moved = [f"{s} {a} {_days(now.get((s, a)))} (was {_days(was.get((s, a)))})"
                 for s, a in sorted(set(was) | set(now)) if was.get((s, a)) != now.get((s, a))]
        if moved:
            shown = "; ".join(moved[:5]) + (f"; and {len(moved) - 5} more" if len(moved) > 5 else "")
            said.append(f"extensions ({len(now)} now): {shown}")
        return said


def _days(extension: timedelta | None) -> str:
    return "none" if extension is None else f"+{extension.total_seconds() / 86400:g} days"


def _config_error(exc: BaseException) -> str:
    """A failure of ``nbgrader_config.py`` in one line, with the line of the file where it happened."""
    if isinstance(exc, SyntaxError):
        return f"{CONFIG}, line {exc.lineno}: {type(exc).__name__}: {exc.msg}"
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).name == CONFIG]
    where = f", line {lines[-1]}" if lines else ""
    return f"{CONFIG}{where}: {type(exc).__name__}: {exc}"


def load(course: Path) -> Settings:
    """The course's settings as its files say now (:class:`Settings`), or :class:`SettingsError` saying why not."""
    course = Path(course)
    config_watch = Watched.of([course / CONFIG])  # before reading: a change while it is read is seen next round
    try:
        config = PyFileConfigLoader(CONFIG, path=str(course)).load_config()
    except ConfigFileNotFound:
        raise SettingsError(f"{course / CONFIG} is missing") from None
    except Exception as exc:  # the instructor's Python: anything it raises is hers to see
        raise SettingsError(_config_error(exc)) from None
    try:
        policy = OnSubmit(config=config)
        term = Term(config=config)
    except TraitError as exc:
        raise SettingsError(f"{CONFIG}: {exc}") from None
    if policy.minutes_between < 0:
        raise SettingsError(f"{CONFIG}: c.OnSubmit.minutes_between is {policy.minutes_between:g}: give 0 or more")
    if policy.poll_seconds <= 0:
        raise SettingsError(f"{CONFIG}: c.OnSubmit.poll_seconds is {policy.poll_seconds:g}: give more than 0")
    if not Path(term.extensions).is_absolute():
        term.extensions = str(course / term.extensions)
    watched = Watched({**config_watch.files, **Watched.of([Path(term.extensions)]).files})
    try:
        term.check()  # every due date, and the extensions (read now, kept by this Term)
    except ConfigError as exc:
        raise SettingsError(str(exc)) from None
    known = available(course)
    unknown = sorted(set(policy.assignments) - set(known))
    if unknown:
        raise SettingsError(f"c.OnSubmit.assignments names no assignment of source/: {', '.join(unknown)}")
    return Settings(policy, term, [a for a in known if a in policy.assignments], watched)


# -- make serve-reload: the request and the answer -------------------------------------------------------
def write_json(path: Path, data: dict) -> None:
    temporary = path.with_name(f".{path.name}-{secrets.token_hex(4)}")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def take_request(folder: Path) -> str | None:
    """The token of a reload the instructor asked for (the request removed), or None."""
    path = folder / REQUEST
    try:
        token = json.loads(path.read_text()).get("token", "")
    except (OSError, ValueError, AttributeError):
        token = "" if path.exists() else None
    if token is not None:
        path.unlink(missing_ok=True)
    return token


def answer(folder: Path, token: str | None, ok: bool, message: str) -> None:
    if token is not None:
        write_json(folder / ANSWER, {"token": token, "ok": ok, "message": message})


class Reloads:
    """The settings part of :class:`.service.Service`: its ``settings`` (:class:`Settings`) as properties, and their
    reading again between hand-ins (:meth:`_check_settings`, called at the start of each round)."""

    @property
    def policy(self):
        return self.settings.policy

    @property
    def term(self):
        return self.settings.term

    @property
    def assignments(self) -> list[str]:
        return self.settings.assignments

    @property
    def interval(self) -> float:
        return self.settings.policy.minutes_between * 60

    @staticmethod
    def _nbgrader():
        app = NbGrader()
        app.initialize([])
        return app

    def _check_settings(self) -> None:
        """Read the settings again when ``nbgrader_config.py`` or the extensions CSV changed, or the instructor
        asked (``make serve-reload``); settings that do not load leave the service with those it had, said."""
        token = take_request(self.folder)
        changed = self.settings.watched.changed()
        if not changed and token is None:
            return
        why = f"{' and '.join(changed)} changed" if changed else "make serve-reload asked"
        seen = Watched.of([Path(name) for name in self.settings.watched.files])
        try:
            new = load(self.course)
            app = self._nbgrader()
            api = self._recorder() if self.api is not None else None  # records with the new c.Term
        except (SystemExit, Exception) as exc:  # the instructor's file: whatever it does, the service goes on
            self.settings.watched = seen  # tried once per change: the next change of either file tries again
            self.broken = str(exc) if isinstance(exc, (CourseError, SystemExit)) else f"{type(exc).__name__}: {exc}"
            message = f"Settings NOT reloaded ({why}): {self.broken}. The service goes on with the settings it had."
            self.log(message)
            answer(self.folder, token, False, message)
            return
        said = new.changes(self.settings)
        kept = []
        if app.coursedir.course_id != self.course_id:
            kept.append(f"the course id {app.coursedir.course_id!r} (still {self.course_id!r})")
        if Path(exchange_root(self.course)) != self.exchange.parent:
            kept.append(f"the exchange {exchange_root(self.course)} (still {self.exchange.parent})")
        self.settings, self.app, self.broken = new, app, ""
        if api is not None:
            self.api = api

        self.ignore = nbgrader_rules(app.coursedir)
        message = f"Settings reloaded ({why}): " + ("; ".join(said) if said else "nothing the service uses changed")
        if kept:
            message += f". Taken only when the service starts again: {'; '.join(kept)}"
        self.log(message)
        answer(self.folder, token, True, message + "\nNow: " + "; ".join(
            f"{key} {value}" for key, value in new.summary().items()))

"""What the grading service tells a student before the instructor does: small pages published as the feedback of
one hand-in, where the student's Assignment List fetches it (:func:`publish`), and how times are written."""

from __future__ import annotations

import html
import os
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.utils import notebook_hash


def when(seconds: float) -> str:
    """A time as a student reads it: the server's local time with its zone, and the date."""
    return datetime.fromtimestamp(seconds, timezone.utc).astimezone().strftime("%H:%M %Z on %a %d %b")


def notice_page(title: str, paragraphs: list[str]) -> str:
    """A small page for a student's Assignment List (paragraphs are plain text; escaped here)."""
    body = "\n".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; line-height: 1.5; color: #1a1a1a; background: #ffffff; margin: 0; }}
main {{ max-width: 42rem; margin: 2rem auto; padding: 0 1rem; }}
h1 {{ font-size: 1.4rem; }}
</style>
</head>
<body>
<main>
<h1>{html.escape(title)}</h1>
{body}
</main>
</body>
</html>
"""


def replaced(seen: float) -> tuple[str, list[str]]:
    return "Replaced by a later hand-in", [
        f"You handed this in at {when(seen)}, then handed in again before it was graded. Only your latest hand-in is "
        "graded: fetch its feedback in the Assignment List."]


def waiting(seen: float, minutes: float, at: float) -> tuple[str, list[str]]:
    return "Waiting to be graded", [
        f"You handed this in at {when(seen)}. Hand-ins are graded at most once every {minutes:g} minutes, and your "
        "last one was graded less than that ago.",
        f"Next grading at {when(at)}: fetch feedback again after that time. If you hand in again meanwhile, your "
        "latest hand-in is the one graded."]


def late(came: float, deadline: float, changed: bool = False) -> tuple[str, list[str]]:
    """The notice of a hand-in after its student's deadline: handed in after it, or (``changed``) handed in before
    and changed after it."""
    if changed:
        return "Changed after the deadline", [
            f"Your hand-in was changed at {when(came)}, after the deadline ({when(deadline)}). It is not graded on "
            "submit: your instructor grades it with the class, as handed in at that time."]
    return "Handed in after the deadline", [
        f"You handed this in at {when(came)}, after the deadline ({when(deadline)}). It is not graded on submit: "
        "your instructor grades it with the class."]


def not_taken(seen: float, why: str) -> tuple[str, list[str]]:
    return "Not taken", [
        f"Your hand-in of {when(seen)} could not be taken: it {why}.",
        "Hand in again from the Assignment List: nbgrader's submit copies your files as they should be."]


def not_graded(seen: float, unreadable: list[str]) -> tuple[str, list[str]]:
    """The notice of a hand-in that was not graded: its notebooks that cannot be read (the student's to mend, said
    at once), or a failure the instructor looks into."""
    if unreadable:
        return "Your notebook cannot be read", [
            f"Your hand-in of {when(seen)} was not graded: {', '.join(unreadable)} cannot be read as a notebook (it "
            "is not a Jupyter notebook file, or it was damaged when it was saved).",
            "Open it in JupyterLab: if it does not open, download it again from the Assignment List and copy your "
            "answers in. Run Validate, then hand in again."]
    return "Not graded automatically", [
        f"Your hand-in of {when(seen)} could not be graded automatically. Your instructor sees why and grades it by "
        "hand; nothing is lost.",
        "Run Validate on your notebook: it shows most problems (a notebook that cannot be read, a cell that never "
        "ends)."]


def publish(outbound: Path, secret: str, notebooks: list[str], text: str) -> str:
    """Publish ``text`` as the feedback page of a hand-in whose submission secret is ``secret`` (as the service
    first saw it), under the names nbgrader's fetch_feedback looks for (one per notebook id in ``notebooks``, as
    release_feedback names a page); returns "" when done or when no page can reach its student, else why it must
    wait."""
    if not secret or not notebooks:
        return ""
    if not outbound.is_dir():  # as nbgrader's release_feedback makes it: pages found by name, never listed
        try:
            outbound.mkdir(mode=0o711)
            outbound.chmod(0o711)
        except OSError as exc:
            return f"cannot make {outbound} ({exc.strerror})"
    for notebook in notebooks:
        final = outbound / f"{notebook_hash(secret=secret, notebook_id=notebook)}.html"
        temporary = final.with_name(final.stem + "-tmp.html")
        temporary.write_text(text, encoding="utf-8")
        temporary.chmod(0o644)
        os.replace(temporary, final)
    return ""

"""What the grading service tells a student before the instructor does: small pages published as the feedback of
one hand-in, where the student's Assignment List fetches it (:func:`publish`), and how times are written."""

from __future__ import annotations

import html
import os
from datetime import datetime, timezone
from pathlib import Path

from . import trust


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


def publish(outbound: Path, inbound: Path, entry: str, owner: int | None, released: Path, text: str) -> str:
    """Publish ``text`` as the feedback page of the folder ``entry`` of ``inbound/`` (read through file descriptors,
    never through a link, and only where it is ``owner``'s: :func:`.trust.inbound_view`), under the names nbgrader's
    fetch_feedback looks for (its secret and each of its notebooks the release has, as release_feedback names a
    page); returns "" when done or when no page can reach its student, else why it must wait."""
    from nbgrader.utils import notebook_hash

    secret, names, _ = trust.inbound_view(inbound, entry, owner)
    released_names = {p.stem for p in released.glob("*.ipynb")}
    notebooks = sorted(released_names & {Path(n).stem for n in names if n.endswith(".ipynb")})
    if secret is None or not notebooks:
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

"""The course's trust rules: what a hand-in may be, and what of it may reach a page or the gradebook.

Each rule is one function here; ``ARCHITECTURE.md``'s trust ledger names it and the test that attacks it.

* :func:`inspect_handin`: hand-in files are data. Only regular files reached without following a link,
  not hard-linked to a file outside the hand-in, within the size caps, are ever read or copied.
* :func:`safe_copy`: copies that never follow links (the exchange's collect, and every copy of a hand-in).
* :func:`inert_outputs`: outputs from a hand-in (stored in it, or produced while grading it) are shown as
  text and checked raster images only, never as HTML, SVG, JavaScript, Markdown or LaTeX.
* :func:`clean_html`: HTML rendered from a student's Markdown is sanitised (nh3, an allow-list): maths,
  tables, images and links keep their formatting; scripts, event handlers, ``javascript:`` URLs, SVG,
  iframes, forms and styles go.
* :func:`capped_grade`: a grade cell's manual score and extra credit stay within what the cell allows.
* :func:`plain_id`: student and assignment ids are plain names (:mod:`.course`).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

#: The largest single file of a hand-in, and the most all its files may hold together.
MAX_FILE_BYTES = 32 * 2**20
MAX_HANDIN_BYTES = 128 * 2**20
#: Names nbgrader itself never copies (its ``CourseDirectory.ignore``), passed over without a word.
IGNORED = (".ipynb_checkpoints", "__pycache__", ".autograde-fingerprint")


@dataclass
class Handin:
    """What :func:`inspect_handin` found: the files that may be read, and those refused with the reason."""

    root: Path
    files: list = field(default_factory=list)  # (absolute path, relative POSIX path, size)
    refused: list = field(default_factory=list)  # (relative POSIX path, why)

    def problems(self) -> list[str]:
        return [why if rel == "." else f"{display_name(rel)}: {why}" for rel, why in self.refused]

    @property
    def whole(self) -> bool:
        """Whether the hand-in was refused as a whole (its folder, or a folder above it, is not a folder)."""
        return any(rel == "." for rel, _ in self.refused)

    def readable(self, rel: str) -> bool:
        return any(r == rel for _, r, _ in self.files)


def _kind(mode: int) -> str | None:
    if stat.S_ISLNK(mode):
        return "a symbolic link: links are never followed, hand in the file itself"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO), not a file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device file, not a file"
    if stat.S_ISSOCK(mode):
        return "a socket, not a file"
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "not a regular file"
    return None


def inspect_handin(root: Path, within: Path | None = None, max_file: int = MAX_FILE_BYTES,
                   max_total: int = MAX_HANDIN_BYTES) -> Handin:
    """Rule: hand-in files are data. Walks ``root`` with ``lstat`` only and sorts every entry into the files
    that may be read and those refused: symbolic links (to anything), named pipes, sockets, device files,
    files hard-linked to a file outside the hand-in, files over ``max_file`` bytes, and files past
    ``max_total`` bytes in all. ``root`` itself, and every folder between ``within`` and it, must be a real
    folder (not a link), or the whole hand-in is refused."""
    handin = Handin(Path(root))
    chain = [Path(root)]
    if within is not None:
        rel = Path(root).relative_to(within)
        chain = [Path(within).joinpath(*rel.parts[: i + 1]) for i in range(len(rel.parts))]
    for folder in chain:
        try:
            mode = os.lstat(folder).st_mode
        except OSError:
            return handin
        why = _kind(mode) or (None if stat.S_ISDIR(mode) else "not a folder")
        if why:
            name = os.path.relpath(folder, within) if within is not None else folder.name
            handin.refused.append((".", f"the hand-in folder {display_name(name)} is {why.split(':')[0]}"))
            return handin
    total, links = 0, {}

    def walk(folder: Path, prefix: str) -> None:
        nonlocal total
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            handin.refused.append((prefix or ".", f"cannot be read ({exc.strerror})"))
            return
        for entry in entries:
            rel = f"{prefix}{entry.name}"
            if entry.name in IGNORED:
                continue
            st = entry.stat(follow_symlinks=False)
            why = _kind(st.st_mode)
            if why:
                handin.refused.append((rel, why))
            elif stat.S_ISDIR(st.st_mode):
                walk(Path(entry.path), rel + "/")
            elif st.st_size > max_file:
                handin.refused.append((rel, f"larger than {max_file // 2**20} MiB ({st.st_size / 2**20:.0f} MiB)"))
            elif total + st.st_size > max_total:
                handin.refused.append((rel, f"the hand-in's files pass {max_total // 2**20} MiB in all here"))
            else:
                total += st.st_size
                handin.files.append((Path(entry.path), rel, st.st_size))
                if st.st_nlink > 1:
                    links.setdefault((st.st_dev, st.st_ino), [st.st_nlink, []])[1].append(rel)

    walk(Path(root), "")
    outside = {rel for nlink, rels in links.values() if nlink > len(rels) for rel in rels}
    if outside:
        handin.files = [f for f in handin.files if f[1] not in outside]
        handin.refused += [(rel, "a hard link to a file outside the hand-in") for rel in sorted(outside)]
    handin.refused.sort()
    return handin


def submitted(course: Path, student: str, assignment: str) -> Handin:
    """:func:`inspect_handin` of ``submitted/<student>/<assignment>`` (the student's folder checked too)."""
    return inspect_handin(Path(course) / "submitted" / student / assignment, within=Path(course) / "submitted")


def safe_copy(src: Path, dest: Path, log=None, ignore=None) -> list[str]:
    """Copy the folder ``src`` to ``dest`` (which must not exist) without following any link: the files
    :func:`inspect_handin` accepts are copied, a symbolic link is copied as the same link (never its target,
    so that the refusal is reported where the hand-in is graded), and anything else refused is left out.
    Returns the refusals (also logged as warnings)."""
    handin = inspect_handin(Path(src))
    Path(dest).mkdir(parents=True)
    for path, rel, _ in handin.files:
        if ignore is not None and ignore(rel):
            continue
        target = Path(dest) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target, follow_symlinks=False)
        shutil.copymode(path, target, follow_symlinks=False)
    for rel, why in handin.refused:
        link = Path(src) / rel
        if rel != "." and os.path.islink(link) and (ignore is None or not ignore(rel)):
            (Path(dest) / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(link), Path(dest) / rel)
    problems = handin.problems()
    for problem in problems:
        if log is not None:
            log.warning("not copied from %s: %s", src, problem)
    return problems


def read_small(path: Path, limit: int = 4096) -> str | None:
    """The text of a small regular file (a hand-in's ``timestamp.txt``), never through a link; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit or st.st_nlink > 1:
            return None
        return os.read(fd, limit).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


#: The exchange's own small files that travel with a hand-in (nbgrader's release_feedback needs them beside
#: the feedback page): each is re-written from its validated value, never copied.
EXCHANGE_FILES = {"timestamp.txt": re.compile(r"\d{4}-\d{2}-\d{2}[ T][\d:.]+( ?(UTC|[+-]\d{2}:?\d{2}|Z))?"),
                  "submission_secret.txt": re.compile(r"[A-Za-z0-9_-]{1,128}")}


def exchange_metadata(folder: Path) -> dict[str, str]:
    """The exchange's small files in ``folder`` that are regular files and have the expected form."""
    found = {}
    for name, form in EXCHANGE_FILES.items():
        text = read_small(Path(folder) / name, 256)
        if text is not None and form.fullmatch(text.strip()):
            found[name] = text.strip()
    return found


def write_exchange_metadata(folder: Path, metadata: dict[str, str]) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    for name, text in metadata.items():
        if name in EXCHANGE_FILES and EXCHANGE_FILES[name].fullmatch(text):
            (Path(folder) / name).write_text(text)


def display_name(name: str) -> str:
    """A file name from a hand-in as it may be printed (terminal, CSV, a page): control characters escaped."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", name)


# -- grades ------------------------------------------------------------------------------------------
#: The course's extra-credit rule: extra credit on one cell is at most this share of the cell's points.
EXTRA_CREDIT_SHARE = 0.25


def _number(value) -> float | None:
    if value is None or value == "":
        return None
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"a score must be a finite number, not {value!r}")
    return number


def capped_grade(manual, extra, max_score) -> tuple[float | None, float | None]:
    """Rule: a cell's manual score is between 0 and its points, its extra credit between 0 and
    ``EXTRA_CREDIT_SHARE`` of its points; values outside are brought to the nearest allowed one."""
    manual, extra = _number(manual), _number(extra)
    top = float(max_score) if max_score is not None else math.inf
    if manual is not None:
        manual = min(max(manual, 0.0), top)
    if extra is not None:
        extra = min(max(extra, 0.0), EXTRA_CREDIT_SHARE * top)
    return manual, extra


# -- what reaches a page ------------------------------------------------------------------------------
#: Outputs of a hand-in are shown as text and as these raster images; nothing else is rendered.
RASTER = ("image/png", "image/jpeg", "image/gif")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _size(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 10_000 else None


def inert_outputs(outputs) -> list:
    """Rule: outputs that came from a hand-in are shown inert. Streams and errors stay text; display data keeps
    ``text/plain`` and base64 raster images (with at most a numeric width and height); HTML, SVG, JavaScript,
    Markdown, LaTeX, widgets and every other type are dropped, with a note when nothing else is left."""
    from nbformat import NotebookNode

    kept = []
    for out in outputs or []:
        if not isinstance(out, dict):
            continue
        kind = out.get("output_type")
        if kind == "stream":
            kept.append(NotebookNode(output_type="stream", name="stderr" if out.get("name") == "stderr" else "stdout",
                                     text=_text(out.get("text", ""))))
        elif kind == "error":
            trace = out.get("traceback") if isinstance(out.get("traceback"), list) else []
            kept.append(NotebookNode(output_type="error", ename=_text(out.get("ename", "")),
                                     evalue=_text(out.get("evalue", "")), traceback=[_text(t) for t in trace]))
        elif kind in ("display_data", "execute_result"):
            data = out.get("data") if isinstance(out.get("data"), dict) else {}
            meta = out.get("metadata") if isinstance(out.get("metadata"), dict) else {}
            shown, sizes = {}, {}
            for mime in RASTER:
                value = data.get(mime)
                if isinstance(value, str) and _BASE64.fullmatch(value):
                    shown[mime] = value
                    own = meta.get(mime) if isinstance(meta.get(mime), dict) else {}
                    size = {k: _size(own.get(k)) for k in ("width", "height") if _size(own.get(k))}
                    if size:
                        sizes[mime] = size
            if "text/plain" in data:
                shown["text/plain"] = _text(data["text/plain"])
            elif not shown and data:
                shown["text/plain"] = (f"[output of type {', '.join(sorted(map(str, data)))} not shown: pages show "
                                       "text and images only]")
            node = NotebookNode(output_type=kind, data=NotebookNode(shown), metadata=NotebookNode(sizes))
            if kind == "execute_result":
                count = out.get("execution_count")
                node.execution_count = count if isinstance(count, int) else None
            kept.append(node)
    return kept


_ATTACHMENT_NAME = re.compile(r"[\w.\- ]{1,100}")
_ATTACHMENT_REF = re.compile(r"attachment:([^\s)\"'>]+)")


def inert_attachments(attachments) -> dict:
    """Rule: a Markdown cell's attachments are kept only as base64 raster images (a pasted plot or photo)."""
    kept = {}
    for name, bundle in (attachments or {}).items() if isinstance(attachments, dict) else []:
        if isinstance(name, str) and _ATTACHMENT_NAME.fullmatch(name) and isinstance(bundle, dict):
            images = {m: v for m, v in bundle.items() if m in RASTER and isinstance(v, str) and _BASE64.fullmatch(v)}
            if images:
                kept[name] = images
    return kept


def inert_markdown_cell(cell) -> None:
    """A Markdown cell as a page may show it: attachments kept by :func:`inert_attachments`, and a reference to
    one that is not kept made plain (nbconvert refuses to render a notebook that names a missing attachment)."""
    kept = inert_attachments(cell.get("attachments"))
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else str(source)
    cell["source"] = _ATTACHMENT_REF.sub(lambda m: m.group(0) if m.group(1) in kept else f"missing-{m.group(0)}",
                                         source)
    if kept:
        cell["attachments"] = kept
    else:
        cell.pop("attachments", None)


_MATHML = {"math", "mi", "mn", "mo", "ms", "mspace", "mtext", "mrow", "mfrac", "msqrt", "mroot", "mstyle", "merror",
           "mpadded", "mphantom", "mfenced", "menclose", "msub", "msup", "msubsup", "munder", "mover", "munderover",
           "mmultiscripts", "mprescripts", "none", "mtable", "mtr", "mtd", "mlabeledtr", "semantics", "annotation"}
_MATHML_ATTRIBUTES = {"display", "mathvariant", "stretchy", "fence", "separator", "lspace", "rspace", "columnalign",
                      "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines", "frame", "width", "height",
                      "depth", "linethickness", "accent", "accentunder", "movablelimits", "form", "minsize", "maxsize",
                      "symmetric", "largeop", "displaystyle", "scriptlevel", "notation", "encoding", "open", "close",
                      "separators", "voffset", "align"}
_HTML = {"a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details", "div",
         "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins", "kbd",
         "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary", "sup", "table",
         "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul"}
_ATTRIBUTES = {"*": {"class", "id", "title", "lang", "dir"}, "a": {"href"}, "img": {"src", "alt", "width", "height"},
               "td": {"colspan", "rowspan", "align"}, "th": {"colspan", "rowspan", "align", "scope"},
               "ol": {"start"}, **{tag: set(_MATHML_ATTRIBUTES) for tag in _MATHML}}
_IMAGE_URL = re.compile(r"data:image/(png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/=\s]+")
_LINK_URL = re.compile(r"(https?://|mailto:)[^\s\x00-\x1f]*|#[\w.:-]*", re.IGNORECASE)
_CLASSES = re.compile(r"[\w-]{1,40}( [\w-]{1,40}){0,7}")
_ID_PREFIX = "user-content-"


def _attribute(tag: str, name: str, value: str) -> str | None:
    value = value.strip()
    if tag == "img" and name == "src":
        return value if _IMAGE_URL.fullmatch(value) else None
    if name == "href":
        if not _LINK_URL.fullmatch(value):
            return None
        return f"#{_ID_PREFIX}{value[1:]}" if value.startswith("#") and len(value) > 1 else value
    if name == "id":
        return _ID_PREFIX + value if re.fullmatch(r"[\w.:-]{1,100}", value) else None
    if name == "class":
        return value if _CLASSES.fullmatch(value) else None
    if name in ("width", "height", "colspan", "rowspan", "start") and tag in _HTML:
        return value if re.fullmatch(r"\d{1,5}", value) else None
    return value


def clean_html(fragment) -> str:
    """Rule: HTML that a student's text became is kept to an allow-list (nh3, the ammonia sanitiser): text
    formatting, headings, lists, tables, maths as MathML, links (http, https, mailto, this page) and images
    given inline as base64; no script, style, event handler, form, frame, SVG, object or remote image. Ids
    are prefixed so that a student's text cannot stand in for the page's own elements.

    Used as nbconvert's ``clean_html`` filter, which the HTML templates apply to Markdown cells, raw cells and
    code (already highlighted) when ``HTMLExporter.sanitize_html`` is on."""
    import nh3

    text = fragment.decode() if isinstance(fragment, bytes) else str(fragment)
    return nh3.clean(text, tags=_HTML | _MATHML, clean_content_tags={"script", "style"}, attributes=_ATTRIBUTES,
                     attribute_filter=_attribute, url_schemes={"http", "https", "mailto", "data"}, link_rel=None,
                     strip_comments=True)


def clean_markdown_html(html) -> str:
    """nbconvert's ``strip_files_prefix`` followed by :func:`clean_html`. Every HTML template renders Markdown as
    ``source | markdown2html | strip_files_prefix`` (nbgrader's Formgrader and the course's feedback page
    too, whose own Markdown blocks skip ``clean_html``), so putting this in that filter's place sanitises
    every rendered Markdown cell, whichever template draws it."""
    from nbconvert.filters.strings import strip_files_prefix

    return clean_html(strip_files_prefix(html))

"""Trust rules on what of a hand-in reaches a page: outputs as text and raster images, Markdown attachments as
raster images, and HTML from a student's text through an allow-list."""

from __future__ import annotations

import re
import traceback

from ..cells import test_line

#: Outputs of a hand-in are shown as text and as these raster images; nothing else is rendered.
RASTER = ("image/png", "image/jpeg", "image/gif")
#: The metadata flag of a note the grader puts on a test cell (kept through :func:`inert_outputs`: a boolean).
GRADER_NOTE = "attention_course_note"
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _size(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 10_000 else None


def _alt(value) -> str | None:
    """A figure's text alternative as plain text of at most 1,000 characters (pages escape it)."""
    if not isinstance(value, str):
        return None
    text = " ".join("".join(c if c.isprintable() else " " for c in value).split())[:1000]
    return text or None


def inert_outputs(outputs) -> list:
    """Rule: outputs that came from a hand-in are shown inert. Streams and errors stay text; display data keeps
    ``text/plain`` and base64 raster images (with at most a numeric width and height and a plain-text ``alt``);
    HTML, SVG, JavaScript, Markdown, LaTeX, widgets and every other type are dropped, with a note when nothing
    else is left. A display's :data:`GRADER_NOTE` flag is kept as ``True`` (it matters only on a test cell, whose
    outputs only the grader writes)."""
    from nbformat import NotebookNode  # here: the fork server, which imports trust with the judge, stays light

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
                    if _alt(own.get("alt")):
                        size["alt"] = _alt(own.get("alt"))
                    if size:
                        sizes[mime] = size
            if "text/plain" in data:
                shown["text/plain"] = _text(data["text/plain"])
            elif not shown and data:
                shown["text/plain"] = (f"[output of type {', '.join(sorted(map(str, data)))} not shown: pages show "
                                       "text and images only]")
            if meta.get(GRADER_NOTE) is True:
                sizes[GRADER_NOTE] = True
            node = NotebookNode(output_type=kind, data=NotebookNode(shown), metadata=NotebookNode(sizes))
            if kind == "execute_result":
                node.execution_count = execution_count(out.get("execution_count"))
            kept.append(node)
    return kept


def execution_count(value):
    """Rule: a cell's count as the student's notebook or kernel gives it, where nbformat takes it (a whole number, 0 or
    more), else None: a count the student's code set itself (``get_ipython().execution_count = -5``) would leave a
    notebook nbformat refuses, the hand-in not graded or its page not written."""
    return value if type(value) is int and value >= 0 else None


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
               "ol": {"start"}, **{tag: set(_MATHML_ATTRIBUTES) for tag in _MATHML},
               "math": _MATHML_ATTRIBUTES | {"tabindex"}}  # a wide formula scrolls in its box: the keyboard reaches it
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
    if name == "tabindex":
        return "0" if value == "0" else None
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


def shown_failure(exc: BaseException, hidden: frozenset, texts: list[str]) -> str:
    """Rule: a failed check's message never carries text the student's code produced on a hidden input. A failure
    on a visible line of the test cell shows whole (the student has those inputs). On a hidden line (``hidden``:
    its line numbers), an error the student's code raised shows as its kind only (the judge never took its message
    in, :func:`.failures.remote_error`); a check's own message keeps its teaching words, with every text the kernel
    sent during the cell (``texts``: strings returned, type names, messages) cut out, and when a piece of such text
    is still found in it (a slice of a string, or more text than was kept), the message is not shown at all."""
    message = str(exc)[:4000]
    line = test_line(traceback_frames(exc))
    if line is None or line not in hidden:
        return message
    if getattr(exc, "from_kernel", False):  # shown after the error's name: "ValueError: raised by your code ..."
        kind = "an exception of a class of your own, " if type(exc).__name__ == "StudentError" else ""
        return (f"{kind}raised by your code on a hidden test's input; its message is not shown, as it could repeat "
                "the test's inputs. Run the visible checks, and your code on inputs of other shapes, to find it.")
    for text in sorted(set(texts), key=len, reverse=True):
        for form in {text, repr(text)[1:-1]}:
            if len(form) >= 3:
                message = message.replace(form, "…")
    if any(_shares_text(message, text) for text in texts):
        return ("a hidden check failed; its message would quote what your code returned, which is not shown for a "
                "hidden test. Run the visible checks to see the same check's message on inputs you have.")
    return message


def traceback_frames(exc: BaseException) -> list:
    """(frame, line) of ``exc``'s traceback, outermost first."""
    return list(traceback.walk_tb(exc.__traceback__))


def _shares_text(message: str, text: str, width: int = 8) -> bool:
    """Whether ``message`` holds any ``width`` characters in a row of ``text`` (or ``text`` was too much to keep)."""
    if text == "\0overflow":
        return True
    if len(text) < width:
        return False
    pieces = {message[i:i + width] for i in range(len(message) - width + 1)}
    return any(text[i:i + width] in pieces for i in range(len(text) - width + 1))

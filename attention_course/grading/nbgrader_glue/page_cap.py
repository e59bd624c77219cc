"""A page's cap: what of a hand-in a page shows (the Formgrader's submission page, a feedback page), measured as the
HTML it becomes, stays within ``max_page_bytes``; a note says where the cut begins.

:class:`.preprocessors.InertContent` calls :func:`cap_page` once every cell is inert: first the hand-in's own cells
(the code and Markdown of the cells the master does not lock, and their attachments), in the notebook's order, then
the outputs of every code cell, in order. Sources come first: an instructor reads the code before what it printed.
A text that does not fit is cut, an image or a display that does not fit is left out, and the hand-in's own cells
(those without nbgrader metadata) that come after the cap is spent are left out of the page. The weights are upper
bounds of what nbconvert makes of a character (:func:`html_size`), so the page's HTML stays within the cap whatever
the hand-in holds; its template, styles, the master's cells and the notes come on top.
"""

from __future__ import annotations

from nbformat import NotebookNode
from nbformat.v4 import new_markdown_cell

from .. import trust

#: What a page shows of a hand-in at most, in bytes of HTML.
MAX_PAGE_BYTES = 8 * 2**20
#: Bytes of HTML a byte of a source may become: highlighted code (a ``<span class="..">`` around every token, and a
#: token may be one character long), Markdown (``# a`` is a heading with an anchor link, ``|a|`` a table cell).
SOURCE_WEIGHT = 24
#: Bytes of HTML around one cell or output (its area, prompt, ``<pre>``).
BOX_HTML = 600
NOTE = "shortened by the grader"


def html_size(text: str) -> int:
    """Bytes of HTML ``text`` may become when a page shows it (escaped by markupsafe; ``ansi2html`` makes a
    ``<span>`` of every colour code)."""
    data = text.encode("utf-8", "surrogatepass")
    return (len(data) + 4 * (data.count(b"<") + data.count(b">") + data.count(b"&"))
            + 5 * (data.count(b'"') + data.count(b"'")) + 60 * data.count(b"\x1b"))


def _fit(text: str, room: int, weight: int = 1) -> str:
    cut = text[:max(0, room // weight)]
    while cut and weight * html_size(cut) > room:
        cut = cut[:max(0, int(len(cut) * room / (weight * html_size(cut))) - 1)]
    return cut


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


class PageCap:
    """Bytes of HTML a page may still give the hand-in's content."""

    def __init__(self, total: int = MAX_PAGE_BYTES):
        self.total, self.left, self.noted = total, total, set()

    def note(self, what: str) -> str:
        """The note where the cut of ``what`` begins (once a page), a short mark after it."""
        if what in self.noted:
            return f"[{NOTE}]"
        self.noted.add(what)
        return (f"[{NOTE}: a page shows at most {self.total / 2**20:g} MiB of a hand-in's code, text and outputs "
                f"(measured as HTML, code and text first); from here on, {what} that do not fit are cut or left out]")

    def take(self, size: int) -> bool:
        if size <= self.left:
            self.left -= size
            return True
        return False

    def fit(self, text: str, weight: int = 1, box: int = 0) -> str | None:
        """None if ``text`` (and its box) fits, which is then counted; else the start of it that fits, the cap spent."""
        if self.take(box + weight * html_size(text)):
            return None
        cut, self.left = _fit(text, max(0, self.left - box), weight), 0
        return cut

    def source(self, cell) -> bool:
        """A cell of the hand-in's own: its source and attachments within the cap. Whether an attachment was left
        out (a reference to it must then become plain text)."""
        dropped = False
        attachments = cell.get("attachments")
        for name in list(attachments) if isinstance(attachments, dict) else []:
            bundle = attachments[name]
            if not self.take(BOX_HTML + sum(len(_text(v)) for v in bundle.values())):
                del attachments[name]
                dropped, self.left = True, 0
        cut = self.fit(_text(cell.get("source", "")), SOURCE_WEIGHT, BOX_HTML)
        if cut is not None:
            note = self.note("the cells of the hand-in's own")
            cell["source"] = cut + (f"\n# {note}" if cell.cell_type == "code" else f"\n\n*{note}*")
        return dropped

    def outputs(self, cell) -> None:
        """A code cell's outputs (already inert: text and raster images) within the cap, a note where cut. A cell the
        master locks (a test: its outputs are the grader's, a line each) keeps them all, and an error keeps its name
        and the start of its message whatever the cap."""
        if cell.get("metadata", {}).get("nbgrader", {}).get("locked"):
            return
        kept, cut = [], False
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "error":
                lines = [_text(t) for t in out.get("traceback", [])]
                ename, evalue = _text(out.get("ename", "")), _text(out.get("evalue", ""))
                if not self.take(BOX_HTML + html_size(ename + evalue) + sum(html_size(t) + 1 for t in lines)):
                    out["ename"], out["evalue"] = _fit(ename, 100) or "Error", _fit(evalue, 300)
                    start = _fit("\n".join(lines), max(0, self.left - BOX_HTML))  # what a page shows of an error
                    out["traceback"] = [start or f"{out['ename']}: {out['evalue']}"]
                    self.left, cut = 0, True
            elif not self.left:
                cut = True
                continue
            elif kind == "stream":
                short = self.fit(_text(out.get("text", "")), box=BOX_HTML)
                if short is not None:
                    out["text"], cut = short, True
            elif kind in ("display_data", "execute_result"):
                data = out.get("data", {})
                if not self.take(BOX_HTML + sum(html_size(_text(v)) for v in data.values())):
                    cut = True
                    if set(data) - {"text/plain"}:
                        self.left = 0
                        continue  # an image that does not fit is left out
                    data["text/plain"], self.left = _fit(_text(data.get("text/plain", "")), self.left - BOX_HTML), 0
            elif not self.take(BOX_HTML):
                cut = True
                continue
            kept.append(out)
        if cut and "outputs" not in self.noted:
            kept.append(NotebookNode(output_type="stream", name="stdout", text="\n" + self.note("outputs") + "\n"))
        cell.outputs = kept


def cap_page(nb, total: int = MAX_PAGE_BYTES) -> None:
    """The hand-in's cells, then every code cell's outputs, within ``total`` bytes of HTML (see the module)."""
    cap, cells, left_out, at = PageCap(total), [], 0, 0
    for cell in nb.cells:
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if not nbgrader and not cap.left:  # the hand-in's own cells after the cap is spent: left out
            left_out, at = left_out + 1, at if left_out else len(cells)
            continue
        if not nbgrader.get("locked") and cell.cell_type in ("code", "markdown", "raw") and cap.source(cell):
            trust.inert_markdown_cell(cell)  # a reference to an attachment left out becomes plain text
        cells.append(cell)
    if left_out:
        cells.insert(at, new_markdown_cell(f"*[{NOTE}: {left_out} more cell{'s' if left_out > 1 else ''} of the "
                                           "hand-in's own not shown: the page's cap is reached]*"))
    nb.cells = cells
    for cell in nb.cells:
        if cell.cell_type == "code":
            cap.outputs(cell)

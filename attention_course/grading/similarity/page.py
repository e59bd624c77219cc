"""The similarity report's page: the flagged pairs ranked, each pair side by side with the matching regions
marked, a histogram of every pair's score with the threshold, and the cells whose code the report cannot read
(written by :func:`.similarity.write`); and the command's summary (:func:`summary`)."""

from __future__ import annotations

import html
from pathlib import Path

from .. import trust

#: Flagged pairs shown side by side on the page (every flagged pair is in the table and the JSON).
SHOWN_PAIRS = 40
#: The page's policy: no script, nothing from the network, images from the report folder only.
POLICY = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

STYLE = """body{font-family:sans-serif;line-height:1.5;color:#1f1f1f;background:#fff;max-width:80em;margin:2em auto;
padding:0 1em} img{max-width:100%;height:auto;display:block;margin:1em 0} caption{text-align:left;font-weight:bold}
h1,h2,h3{overflow-wrap:anywhere} a{color:#0b57a4;text-decoration:underline} a:focus{outline:3px solid #0b57a4;
outline-offset:2px} table{border-collapse:collapse;max-width:100%} td,th{border:1px solid #767676;padding:.25em .5em;
text-align:left;overflow-wrap:anywhere} .pair{display:grid;grid-template-columns:1fr 1fr;gap:1em}
@media (max-width:700px){.pair{grid-template-columns:1fr}} .pair>div{min-width:0}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f6f8fa;border:1px solid #767676;padding:.5em;margin:0;
font-size:.85em} .part{margin:1em 0} mark{background:#ffd966;color:#1f1f1f;border-bottom:2px solid #1f1f1f}"""


def histogram(result, out: Path) -> tuple[Path, str]:
    """A histogram of every pair's score (pairs sharing no code count at 0) with the threshold marked, and its text
    alternative."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(result.students)
    total = n * (n - 1) // 2
    scores = [p["score"] for p in result.pairs] + [0.0] * (total - len(result.pairs))
    flagged = sum(p["flagged"] for p in result.pairs)
    path = out / f"{result.assignment}_scores.png"
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    ax.hist(scores, bins=20, range=(0, 1), color="#4c72b0", edgecolor="white")
    ax.axvline(result.threshold, color="#b00020", linestyle="--", linewidth=2)
    ax.text(result.threshold, 0.97, f" threshold {result.threshold:g}: {flagged} flagged", color="#b00020",
            transform=ax.get_xaxis_transform(), va="top", fontsize=9)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("similarity score of a pair (0 = nothing shared, 1 = the same code)")
    ax.set_ylabel("pairs of students")
    ax.set_title(f"{result.assignment}: {total} pairs of {n} hand-ins")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    below = sum(s < 0.2 for s in scores)
    top = ", ".join(f"{p['score']:.2f}" for p in result.pairs[:3]) or "none above 0"
    alt = (f"Histogram of the similarity scores of all {total} pairs of the {n} hand-ins of {result.assignment}, "
           f"on a logarithmic count axis: {below} pairs score under 0.2; the highest scores are {top}; the threshold "
           f"{result.threshold:g} is marked by a dashed line and {flagged} pair{'s' if flagged != 1 else ''} "
           "reach it.")
    return path, alt


def marked(code: str, slices) -> str:
    """``code`` escaped, with each matching region in a <mark>."""
    if not slices or not len(slices[0]):
        return html.escape(code)
    parts, at = [], 0
    for start, end in sorted(zip(slices[0], slices[1])):
        start, end = max(start, at), min(end, len(code))
        if start >= end:
            continue
        parts += [html.escape(code[at:start]), "<mark>", html.escape(code[start:end]), "</mark>"]
        at = end
    parts.append(html.escape(code[at:]))
    return "".join(parts)


def _evidence(pair: dict) -> str:
    """The strongest evidence of a pair, in words: its most shared part (or parts) or the whole hand-in."""
    best = pair["parts"][0] if pair.get("parts") else None
    if best is None or best["score"] <= pair.get("whole", pair["score"]):
        return "the whole hand-in"
    return f"the part {best['part']}" if "of" not in best else f"the parts {', '.join(best['of'])} together"


def _part_sections(i: int, pair: dict) -> str:
    """Each part a pair shares, side by side with its matching regions marked."""
    a, b = pair["students"]
    scores = {}
    for x in pair.get("parts", []):
        for name in x.get("of", [x["part"]]):
            scores.setdefault(name, x["score"] if "of" not in x else None)
    out = []
    for name, found in (pair.get("part_slices") or {}).items():
        said = f"score {scores[name]:.2f}" if scores.get(name) is not None else "the same in both"
        sides = "".join(f"""<div><h4>{html.escape(who)}</h4><pre>{marked(text, found['slices'][k])}</pre></div>"""
                        for k, (who, text) in enumerate(zip((a, b), found["texts"])))
        out.append(f"""<div class="part"><h3>Part <code>{html.escape(name)}</code>: {said}</h3>
<div class="pair by-part">{sides}</div></div>""")
    return "\n".join(out)


def _pair_section(i: int, pair: dict, texts: dict) -> str:
    a, b = pair["students"]
    slices = pair.get("slices") or [[[], []], [[], []]]
    sides = []
    for who, share, sl in ((a, pair["shares"][0], slices[0]), (b, pair["shares"][1], slices[1])):
        sides.append(f"""<div><h4>{html.escape(who)}: {100 * share:.0f}% of this code is marked</h4>
<pre>{marked(texts.get(who, ''), sl)}</pre></div>""")
    whole = pair.get("whole", pair["score"])
    return f"""<section aria-labelledby="pair-{i}-title">
<h2 id="pair-{i}">{i}. <span id="pair-{i}-title">{html.escape(a)} and {html.escape(b)}: score {pair['score']:.2f}</span></h2>
<p>Strongest evidence: {html.escape(_evidence(pair))}. The whole hand-ins score {whole:.2f}.</p>
{_part_sections(i, pair)}
<h3>The whole hand-ins</h3>
<div class="pair">{''.join(sides)}</div>
<p><a href="#flagged">Back to the flagged pairs</a></p>
</section>"""


def where(entry: dict) -> str:
    """Where an opaque entry is, in words: a notebook's cell (counted from 1, as a reader counts) or a file."""
    if entry["cell"] is None:
        return trust.display_name(entry["file"])
    cell_id = f", id {entry['cell_id']}" if entry["cell_id"] else ""
    return f"{trust.display_name(entry['file'])}, cell {entry['cell'] + 1} from the top{cell_id}"


def _opaque_section(result) -> str:
    if not result.opaque:
        return ("<h2 id=\"opaque\">Code it cannot read</h2>\n<p>None: no hand-in runs code that it computes as it "
                "runs.</p>")
    rows, sections = [], []
    for i, o in enumerate(result.opaque, 1):
        place = html.escape(where(o))
        runs = "".join(f"<li><code>{html.escape(c)}</code></li>" for c in o["constructs"])
        rows.append(f"<tr><td>{html.escape(o['student'])}</td><td>"
                    + (f'<a href="#opaque-{i}">{place}</a>' if o["excerpt"] else place) + f"</td><td><ul>{runs}</ul></td></tr>")
        if o["excerpt"]:
            sections.append(f"""<section aria-labelledby="opaque-{i}"><h3 id="opaque-{i}">{html.escape(o['student'])}: {place}</h3>
<pre>{html.escape(o['excerpt'])}</pre>
<p><a href="#opaque">Back to the code it cannot read</a></p></section>""")
    students = len({o["student"] for o in result.opaque})
    return f"""<h2 id="opaque">Code it cannot read</h2>
<p>{students} hand-in{'s' if students != 1 else ''} run code that the report cannot read, so a copy in it would not be
seen: code computed as it runs (<code>exec</code> of a decoded string, a module imported by a computed name, unpickled
or compiled code), or a file it does not read. Look at each of these cells: the start of each one's code is below.</p>
<table><caption>Cells and files whose code the report cannot read</caption>
<tr><th scope="col">student</th><th scope="col">where</th><th scope="col">what it runs</th></tr>
{chr(10).join(rows)}
</table>
{chr(10).join(sections)}"""


def summary(result, page: Path | None = None) -> str:
    """What ``python -m attention_course.grading similarity`` prints for an assignment."""
    flagged = [p for p in result.pairs if p["flagged"]]
    n = len(result.students)
    lines = [f"{result.assignment}: {n} hand-ins compared, {n * (n - 1) // 2} pairs, {len(flagged)} flagged "
             f"(score >= {result.threshold:g})"]
    lines += [f"  {p['score']:.2f}  {p['students'][0]} and {p['students'][1]}: {_evidence(p)}" for p in flagged[:20]]
    if len(flagged) > 20:
        lines.append(f"  ... and {len(flagged) - 20} more (see {page or 'the page'})")
    lines += [f"  opaque: {o['student']}: {where(o)}: {'; '.join(o['constructs'])}" for o in result.opaque]
    lines += [f"  not compared: {trust.display_name(s)}: {why}" for s, why in result.skipped.items()]
    lines += [f"  compared in part: {s}: {what}" for s, what in result.notes.items()]
    return "\n".join(lines)


def write_page(result, out: Path) -> Path:
    """Write ``<assignment>.html`` and its histogram into ``out``; returns the page."""
    hist, alt = histogram(result, out)
    flagged = [p for p in result.pairs if p["flagged"]]
    n = len(result.students)
    rows = "\n".join(
        f"<tr><td>{i}</td><td>" + (f'<a href="#pair-{i}">' if i <= SHOWN_PAIRS else "")
        + f"{html.escape(p['students'][0])} and {html.escape(p['students'][1])}"
        + ("</a>" if i <= SHOWN_PAIRS else "")
        + f"</td><td>{p['score']:.2f}</td><td>{100 * p['shares'][0]:.0f}% / {100 * p['shares'][1]:.0f}%</td>"
        f"<td>{html.escape(_evidence(p))}</td></tr>"
        for i, p in enumerate(flagged, 1))
    table = (f"""<table><caption>Flagged pairs, the most similar first</caption>
<tr><th scope="col">rank</th><th scope="col">students</th><th scope="col">score</th>
<th scope="col">share of each one's whole code found in the other</th><th scope="col">strongest evidence</th></tr>
{rows}
</table>""" if flagged else "<p>No pair reaches the threshold.</p>")
    skipped = "".join(f"<li>{html.escape(s)}: {html.escape(why)}</li>" for s, why in result.skipped.items())
    skipped = f"<h2>Not compared</h2><ul>{skipped}</ul>" if skipped else ""
    partly = "".join(f"<li>{html.escape(s)}: {html.escape(what)}</li>" for s, what in result.notes.items())
    skipped += f"<h2>Compared in part</h2><ul>{partly}</ul>" if partly else ""
    more = (f"<p>The {len(flagged) - SHOWN_PAIRS} flagged pairs after the first {SHOWN_PAIRS} are in the table and "
            f"in {html.escape(result.assignment)}.json.</p>" if len(flagged) > SHOWN_PAIRS else "")
    sections = "\n".join(_pair_section(i, p, result.texts) for i, p in enumerate(flagged[:SHOWN_PAIRS], 1))
    page = out / f"{result.assignment}.html"
    page.write_text(f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{POLICY}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Similarity of the hand-ins of {html.escape(result.assignment)}</title>
<style>{STYLE}</style></head>
<body><main>
<h1>Similarity of the hand-ins of {html.escape(result.assignment)}</h1>
<p><a href="../index.html">The class report</a></p>
<p>{n} hand-ins compared on the students' own code: the release's cells (starter code, locked cells, tests) are
left out. Each hand-in is compared whole and by part: each function or class the release names (the answer to one
question, with the helpers it calls) against the same part of every other hand-in, so one function copied alone,
or halves taken from two authors, are seen however different the rest is. A score is the mean share of each side's
code found in the other (copydetect's winnowing fingerprints), weighed by how rare the shared code is in the class:
what only the pair shares counts fully, what many hand-ins or the master's answer hold (the short idiomatic answer)
counts for little. A pair's score is its strongest evidence, a part's or the whole's; pairs at {result.threshold:g}
or above are flagged. A flag asks for a look, it is not a verdict: read the pair side by side. Code that it cannot
read (computed as the hand-in runs) is listed under <a href="#opaque">Code it cannot read</a>:
{len(result.opaque) or 'none'} here.</p>
<p>What the normaliser removed before comparing, so that it does not hide a copy: comments, formatting, docstrings
and every name (each name counts the same); dead code and unused names; the order of definitions and of statements
that do not depend on each other (in loops too); NumPy's and PyTorch's spellings of one operation (<code>np.max</code>
and <code>torch.amax</code>, <code>axis</code> and <code>dim</code>, <code>@</code>, <code>matmul</code> and
<code>einsum</code>, <code>.T</code> and <code>.transpose(-2, -1)</code>, <code>x / sqrt(d)</code> and
<code>x * d ** -0.5</code>, conversions between arrays and tensors); operators written as functions; helpers and
temporaries put where they are used. The code below is shown as compared.</p>
<img src="{hist.name}" alt="{html.escape(alt)}">
<h2 id="flagged">Flagged pairs</h2>
{table}
{more}
{_opaque_section(result)}
{skipped}
<p>Below, each flagged pair's code as compared (printed again from its syntax tree); <mark>marked</mark> regions are
found in both.</p>
{sections}
</main></body></html>
""", encoding="utf-8")
    return page

"""Audit pages the course wrote with axe-core (WCAG 2.0/2.1 A and AA): ``python tests/tools/audit_pages.py FOLDER ...``.

Every ``*.html`` under the folders (``feedback/``, ``report/``, ``solutions/``) is opened in Chromium and audited;
prints, per kind of page, how many pages have violations and, per rule, the number of elements; with ``--json
FILE`` also writes every page's violations. ``make audit`` runs it over the demo class. Exits with 1 when any
page has a violation.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]

from browser import AUDITOR, AXE, audit, chromium  # noqa: E402


def kind(path: Path) -> str:
    parts = path.parts
    for name in ("feedback", "report", "solutions"):
        if name in parts:
            return name
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--json")
    args = parser.parse_args()
    if AUDITOR is None or not AXE.is_file():
        print("needs Chromium and axe-core (make install)", file=sys.stderr)
        return 2
    pages = sorted(p.resolve() for folder in args.folders for p in folder.rglob("*.html"))
    results, by_kind = {}, collections.defaultdict(lambda: [0, 0, collections.Counter()])
    with chromium() as browser:
        context = browser.new_context(bypass_csp=True, viewport={"width": 1280, "height": 900})
        page = context.new_page()
        for path in pages:
            page.goto(path.as_uri())
            found = audit(page)
            results[str(path)] = found
            tally = by_kind[kind(path)]
            tally[0] += 1
            tally[1] += bool(found)
            for v in found:
                tally[2][v["id"]] += len(v["nodes"])
        context.close()
    for name, (n, bad, rules) in sorted(by_kind.items()):
        detail = ", ".join(f"{rule} {count}" for rule, count in rules.most_common()) or "none"
        print(f"{name}: {n} pages, {bad} with violations; elements per rule: {detail}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 1 if any(results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

"""The papers' ids ("paper 000") that README.md and docs/ use are listed on docs/papers.md, and the README's
first screen points to that page where it first names one (issue 35 item 5: "paper 000" stood on the
README's first screen with no pointer)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ID = re.compile(r"\b[Pp]apers? (\d{3})\b")


def test_every_paper_id_in_use_is_on_the_papers_page() -> None:
    used = {m for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")] for m in ID.findall(page.read_text())}
    listed = set(re.findall(r"^\d+\. \*\*Paper (\d{3})\.\*\*", (ROOT / "docs" / "papers.md").read_text(), re.M))
    assert used, "the pattern finds no id: it no longer matches how the docs write them"
    assert used <= listed, f"ids used but not listed on docs/papers.md: {sorted(used - listed)}"


def test_the_readmes_first_screen_links_the_papers_page_at_its_first_id() -> None:
    first_screen = (ROOT / "README.md").read_text().split("\n## ", 1)[0]
    first = ID.search(first_screen)
    assert first is not None  # (if the first screen names no paper, this test has nothing to hold)
    assert re.match(r"[Pp]aper \d{3}\]\(docs/papers\.md\)", first_screen[first.start() :]), first_screen[
        first.start() - 40 :
    ]

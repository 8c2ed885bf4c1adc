"""Every relative link of the README and docs/ reaches its file, and its #anchor a heading there.

A heading's anchor is GitHub's: the heading's text in lower case, everything but letters, digits,
spaces, `-` and `_` dropped, spaces made `-`, and `-1`, `-2`, ... after repeats. Renaming a
module renames the headings that name it, so a link written before the rename breaks silently;
this test names each one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (code blocks skipped)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading is None:
            continue
        anchor = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(anchor, 0)
        anchors.add(anchor if count == 0 else f"{anchor}-{count}")
        seen[anchor] = count + 1
    return anchors


def test_anchors_follow_github(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Self-play and replay (`amazons.train.selfplay`, `amazons.records`)\n"
                    "## GPU (`--suite gpu`)\n```\n# not a heading\n```\n## Notes\n### Notes\n")
    assert heading_anchors(page) == {
        "self-play-and-replay-amazonstrainselfplay-amazonsrecords", "gpu---suite-gpu", "notes",
        "notes-1"}


@pytest.mark.parametrize("doc", DOCS, ids=[doc.relative_to(REPO).as_posix() for doc in DOCS])
def test_every_relative_link_reaches_its_target(doc):
    broken = []
    for target in LINK.findall(FENCE.sub("", doc.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        destination = (doc.parent / file_part).resolve() if file_part else doc
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in heading_anchors(destination):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{doc.relative_to(REPO)}: " + "; ".join(broken)

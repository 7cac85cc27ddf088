"""Issue 43.5: the docs by role hold together.

docs/reference/ is what the code says (a change to a config model or a command's --help
without `python -m bot.cli.reference --write` fails here), and every link in README.md and
docs/ lands on a file of the repository and, with a #fragment, on one of its headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.cli import reference

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_reference_pages_are_what_the_code_says(name: str) -> None:
    committed = (ROOT / "docs" / "reference" / name).read_text()
    assert committed == reference.pages()[name], (
        f"docs/reference/{name} is out of date: run `python -m bot.cli.reference --write`")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return LINK.findall(text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands_in_the_repository(page: Path) -> None:
    for link in _links(page):
        if re.match(r"^[a-z]+:", link):  # http(s), mailto: not checked offline
            continue
        path, _, fragment = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.is_relative_to(ROOT), f"{page.name}: {link} leaves the repository"
        assert target.exists(), f"{page.name}: {link} names no file"
        if fragment and target.suffix == ".md":
            assert fragment in _anchors(target), f"{page.name}: {link} names no heading"


def test_the_readme_is_short_and_points_every_reader_somewhere() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for role in ("docs/start.md", "docs/approve.md", "docs/operate.md",
                 "docs/reference/config.md", "docs/reference/cli.md", "docs/contribute.md"):
        assert f"]({role}" in readme, role

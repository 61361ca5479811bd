"""The README and docs/: links that resolve, a map of every module, a README that stays one screen."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]

#: ``[text](target)`` and ``![alt](target)``, outside code spans.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def links(page: Path) -> list[str]:
    """The link targets of ``page``, fenced code blocks and code spans left out."""
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    return LINK.findall(text)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of ``page``'s headings."""
    text = re.sub(r"(?ms)^```.*?^```", "", page.read_text())
    found = set()
    for heading in re.findall(r"(?m)^#+ (.+)$", text):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


class TestLinks:
    @pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
    def test_every_relative_link_resolves(self, page: Path) -> None:
        """Each relative link (and its #anchor) names a file, or a heading, that exists."""
        broken = []
        for target in links(page):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
                broken.append(target)
        assert broken == []

    def test_the_check_finds_a_broken_link(self, tmp_path: Path) -> None:
        """The link reader itself: a link in prose is read, one in a code span or fence is not."""
        page = tmp_path / "p.md"
        page.write_text("See [a](a.md) and ![b](b.png).\n`[c](c.md)`\n```\n[d](d.md)\n```\n")
        assert links(page) == ["a.md", "b.png"]

    def test_every_docs_page_is_linked_from_the_readme(self) -> None:
        """The README is the door: each page of docs/ is one link away."""
        linked = {Path(target.partition("#")[0]).name for target in links(ROOT / "README.md")}
        assert [p.name for p in DOCS if p.name not in linked] == []


class TestModuleMap:
    def test_every_module_is_in_the_development_map(self) -> None:
        """docs/development.md names every module of graceful/ by its path."""
        text = (ROOT / "docs" / "development.md").read_text()
        modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "graceful").rglob("*.py"))
        assert len(modules) > 50
        assert [m for m in modules if f"`{m}`" not in text] == []

    def test_the_map_names_no_module_that_is_gone(self) -> None:
        """Nor a module that no longer exists."""
        text = (ROOT / "docs" / "development.md").read_text()
        named = re.findall(r"`(graceful/[\w/]+\.py)`", text)
        assert [m for m in named if not (ROOT / m).exists()] == []


class TestReadme:
    def test_one_screen_to_start(self) -> None:
        """One screen: at most 80 lines, holding the Gunicorn, Flask and Django one-liners."""
        lines = (ROOT / "README.md").read_text().splitlines()
        assert len(lines) <= 80
        first = "\n".join(lines)
        for one_liner in ("gunicorn -c python:graceful.conf app:app", "Graceful(app)", "graceful.conf mysite.wsgi"):
            assert one_liner in first

    def test_the_two_quick_start_commands(self) -> None:
        """The quick start's fenced block holds exactly the two commands: run the example, run the tests."""
        text = (ROOT / "README.md").read_text()
        block = re.search(r"(?ms)^## Quick start\n.*?^```sh\n(.*?)^```", text)
        assert block is not None
        commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
        assert commands == ["scripts/run-example", "scripts/run-tests"]

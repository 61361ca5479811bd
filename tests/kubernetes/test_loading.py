"""Tests for graceful.kubernetes.loading: YAML read as safe_load_all reads it, within bounds."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from graceful.kubernetes import loading
from graceful.kubernetes.loading import MAX_ALIAS_NODES, MAX_DEPTH, Unreadable, documents
from tests.kubernetes import hostile
from tests.kubernetes.helpers import EXAMPLES, MANIFESTS


@pytest.fixture(params=["libyaml", "pure"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test with libyaml's parser, then with PyYAML's pure-Python one (the fallback)."""
    if request.param == "libyaml":
        if not yaml.__with_libyaml__:
            pytest.skip("PyYAML was built without libyaml here")  # the pure run still covers the code
        monkeypatch.setattr(loading, "_LOADER", yaml.CSafeLoader)
    else:
        monkeypatch.setattr(loading, "_LOADER", loading._BoundedSafeLoader)
    yield request.param


def load(text: str) -> list[Any]:
    """Return every document of a text."""
    return list(documents(text))


class TestSameAsSafeLoad:
    """Documents mean what yaml.safe_load_all says they mean."""

    @pytest.mark.parametrize(
        "path",
        sorted(path for path in [*MANIFESTS.glob("*.yaml"), *EXAMPLES.glob("*.yaml")] if path.name != "invalid.yaml"),
        ids=lambda path: path.name,
    )
    def test_every_manifest(self, parser: str, path: Path) -> None:
        """Each manifest of the tests and examples reads the same as with yaml.safe_load_all."""
        text = path.read_text(encoding="utf-8")
        assert load(text) == list(yaml.safe_load_all(text))

    @pytest.mark.parametrize(
        "text",
        [
            "x: yes\ny: 010\nz: 0x1f\nw: ~\nv: .inf\nu: 1_000\nt: '5'\ns: |\n  block\n",
            "a: &x {b: 1}\nc: {<<: *x, d: 2}\n",
            "a: {<<: [{x: 1}, {x: 2, y: 3}], y: 4}\n",
            "a: &a [1, 2]\nb: [*a, *a]\n",
            "---\n---\na: 1\n...\n",
            "",
            "? =\n: 1\n",
            "a: !!str 5\nb: !!int '7'\nc: !!float 1\n",
            "a: !!binary aGVsbG8=\n",
            "[1, [2, [3]]]\n",
        ],
    )
    def test_scalars_tags_merges(self, parser: str, text: str) -> None:
        """Implicit types, explicit tags, merge keys, anchors and empty documents read as safe_load_all reads them."""
        assert load(text) == list(yaml.safe_load_all(text))

    def test_timestamps_and_sets(self, parser: str) -> None:
        """Timestamps are dates, !!set is a set."""
        (doc,) = load("when: 2001-12-14\nwhich: !!set {a, b}\n")
        assert doc == {"when": datetime.date(2001, 12, 14), "which": {"a", "b"}}

    def test_aliases_share(self, parser: str) -> None:
        """An alias is the anchored object itself, not a copy (so expanding costs nothing)."""
        (doc,) = load("a: &a [1]\nb: *a\n")
        assert doc["a"] is doc["b"]

    def test_one_document_at_a_time(self, parser: str) -> None:
        """documents() yields the first document before reading on: a later error comes after it."""
        stream = documents("a: 1\n---\nb: [\n")
        assert next(stream) == {"a": 1}
        with pytest.raises(yaml.YAMLError):
            next(stream)


class TestNotYaml:
    """What is not YAML raises PyYAML's errors, with a mark for the one-line reason."""

    @pytest.mark.parametrize(
        ("text", "problem"),
        [
            ("a: [\n", "(line 2, column 1)"),
            ("a: *nowhere\n", "found undefined alias 'nowhere'"),
            ("a: &x 1\nb: &x 2\n", "found duplicate anchor 'x'"),
            ("a: !custom 1\n", "could not determine a constructor for the tag '!custom'"),
            ("a: !!omap [{x: 1}]\n", "could not determine a constructor for the tag"),
            ("? [1]\n: 2\n", "found unhashable key"),
            ("a: {<<: 5}\n", "expected a mapping or list of mappings for merging"),
        ],
    )
    def test_errors(self, parser: str, text: str, problem: str) -> None:
        """Each malformed text raises a YAMLError whose one-line reason names the problem."""
        with pytest.raises(yaml.YAMLError) as raised:
            load(text)
        assert problem in loading.yaml_reason(raised.value)
        assert "\n" not in loading.yaml_reason(raised.value)


class TestBounds:
    """Hostile input is refused with one line, in bounded time and memory."""

    def test_ten_thousand_levels(self, parser: str) -> None:
        """10,000 nested lists (a RecursionError for PyYAML's composer) are refused in one line.

        libyaml refuses flow nesting past 1000 levels itself; the pure parser reaches the builder's bound.
        """
        with pytest.raises((Unreadable, yaml.YAMLError)) as raised:
            load(hostile.deep_nesting(10_000))
        reason = str(raised.value) if isinstance(raised.value, Unreadable) else loading.yaml_reason(raised.value)
        assert "nesting" in reason
        assert "\n" not in reason

    def test_unclosed_flow_collections(self, parser: str) -> None:
        """8,000 unclosed [ (20 s of scanning for PyYAML's pure scanner unbounded) are refused at the bound."""
        with pytest.raises((Unreadable, yaml.YAMLError)) as raised:
            load("a: " + "[" * 8000)
        if parser == "pure":
            assert str(raised.value) == f"nesting deeper than {MAX_DEPTH} levels (line 1)"

    @pytest.mark.parametrize("make", [hostile.deep_nesting, hostile.deep_block_nesting], ids=["flow", "block"])
    def test_past_the_bound(self, parser: str, make: Any) -> None:
        """Flow or block nesting past MAX_DEPTH is refused by the builder, naming the bound and the line."""
        with pytest.raises(Unreadable, match=rf"^nesting deeper than {MAX_DEPTH} levels \(line 1\)$"):
            load(make(MAX_DEPTH + 100))

    def test_deepest_accepted(self, parser: str) -> None:
        """Nesting up to the bound is read (the document's mapping is one level)."""
        (doc,) = load(hostile.deep_nesting(MAX_DEPTH - 1))
        depth, node = 0, doc["a"]
        while node:
            depth, node = depth + 1, node[0]
        assert depth == MAX_DEPTH - 2  # the innermost list is empty

    def test_alias_bomb(self, parser: str) -> None:
        """A billion laughs inside a container's args is refused before it is expanded."""
        with pytest.raises(
            Unreadable, match=r"aliases expand to more than 1,000,000 nodes \(line \d+\): an alias bomb"
        ):
            load(hostile.alias_bomb_in_container())

    def test_modest_aliases(self, parser: str) -> None:
        """Reusing a list by alias a few times is fine."""
        text = "a: &env [{name: A, value: '1'}]\nb: *env\nc: *env\n"
        assert load(text) == list(yaml.safe_load_all(text))

    def test_alias_budget_counts_over_the_input(self, parser: str) -> None:
        """The alias budget is for the whole input: many documents each just under it add up."""
        width = 1000
        anchor = "a: &a [" + ", ".join(["x"] * width) + "]\n"
        aliases = "b: [" + ", ".join(["*a"] * (MAX_ALIAS_NODES // width // 3)) + "]\n"
        document = anchor + aliases
        assert len(load(document)) == 1
        with pytest.raises(Unreadable, match="alias bomb"):
            load("---\n".join([document] * 4))

    def test_recursive_alias(self, parser: str) -> None:
        """An alias inside the collection it names (a structure without end) is refused."""
        with pytest.raises(Unreadable, match=r"the alias \*a refers to a collection that contains it"):
            load("a: &a [1, *a]\n")

    @pytest.mark.parametrize(
        ("text", "shown"),
        [
            ("a: " + "9" * 5000 + "\n", "99999999999999999999…(5000 characters)"),
            ("a: 2001-02-30\n", "2001-02-30"),
        ],
    )
    def test_values_python_cannot_build(self, parser: str, text: str, shown: str) -> None:
        """An integer past Python's 4300 digits, or February 30th, is refused naming the value, not a ValueError."""
        with pytest.raises(Unreadable, match=r"cannot be read \(line 1\)") as raised:
            load(text)
        assert shown in str(raised.value)

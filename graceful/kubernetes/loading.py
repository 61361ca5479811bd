"""Reading manifest files safely: every input either yields its documents or one readable reason.

A manifest can be hostile or just broken, and ``graceful check`` runs in CI
on whatever a chart renders, so reading is bounded:

- **Streaming**: documents are built one at a time from the parser's events,
  so a 20 MB ``helm template`` output of 70,000 documents is never held in
  memory at once (:func:`documents` is a generator).
- **libyaml when present** (``yaml.CSafeLoader``, else the pure-Python
  ``yaml.SafeLoader``): the C parser turns text into events about ten times
  faster. Only its event stream is used; the objects are built here.
  Either refuses flow nesting deeper than :data:`MAX_DEPTH` while scanning
  (libyaml at 1000 levels, the pure scanner here), so that its own cost stays
  linear.
- **No recursion**: PyYAML's composer recurses once per nesting level and a
  10,000-deep ``[[[...`` raises RecursionError. The builder below keeps its own
  stack and refuses nesting deeper than :data:`MAX_DEPTH`, far deeper than any
  Kubernetes object (CRD schemas, the deepest, nest a few dozen levels) and
  shallow enough that code which does recurse over the result (``==``,
  ``repr``, ``json``) stays under Python's default recursion limit of 1000.
- **Bounded aliases**: an alias shares the anchored object, as PyYAML does,
  so a "billion laughs" document costs nothing to build; but any walk over it
  (or ``str()`` of it) would visit every expanded node. The builder counts
  the nodes that aliases of collections add when expanded and refuses an
  input once they pass :data:`MAX_ALIAS_NODES`. An alias to a collection
  that is still open (a recursive structure) is refused too: a walk over it
  would never end.

Scalars are resolved and constructed by PyYAML's own resolver and safe
constructors, so values mean what ``yaml.safe_load`` says they mean (``yes``
is a bool, ``010`` is 8, timestamps are datetimes). Merge keys (``<<``) are
honoured; ``!!set`` builds a set; other explicit collection tags (``!!omap``,
``!!pairs``, custom tags) are refused, as Kubernetes has no use for them.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, TextIO, cast

import yaml
from yaml import events
from yaml.constructor import ConstructorError
from yaml.nodes import ScalarNode

__all__ = ["MAX_ALIAS_NODES", "MAX_DEPTH", "Unreadable", "documents", "yaml_reason"]

#: Deepest nesting of mappings and sequences accepted (see the module docstring).
MAX_DEPTH = 512

#: Most nodes that aliases of collections may add to one input when expanded.
#: A hand-written manifest that reuses a container's env list with an alias
#: adds a few hundred; the classic 9-level "billion laughs" adds 387 million.
MAX_ALIAS_NODES = 1_000_000


class _BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's pure-Python loader, refusing flow nesting past :data:`MAX_DEPTH` as it scans.

    Its scanner keeps a possible simple key per open flow collection and walks
    them all on every token: 8,000 unclosed ``[`` take 20 s. libyaml refuses
    flow nesting past 1000 levels itself; this bound does the same here,
    before the cost grows.
    """

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        """Open a flow collection, unless it nests too deep."""
        if self.flow_level >= MAX_DEPTH:
            raise Unreadable(f"nesting deeper than {MAX_DEPTH} levels (line {self.line + 1})")
        super().fetch_flow_collection_start(token_class)


#: libyaml's parser when PyYAML was built with it, else the pure-Python one.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", _BoundedSafeLoader)

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_SET = "tag:yaml.org,2002:set"
_MERGE = "tag:yaml.org,2002:merge"
_VALUE = "tag:yaml.org,2002:value"

#: First characters for which PyYAML's implicit resolvers may find a tag other than str.
#: A plain scalar starting with anything else is a string without running a regex.
_RESOLVABLE = frozenset(key for key in _LOADER.yaml_implicit_resolvers if key is not None)
_ANY_START_RESOLVES = None in _LOADER.yaml_implicit_resolvers


class Unreadable(Exception):
    """An input that cannot be read as YAML; the message says why in one line, for the user."""


class _MergeKey:
    """The ``<<`` key of a mapping: merge the mappings it names (YAML merge key)."""


_MERGE_KEY = _MergeKey()


@dataclasses.dataclass(slots=True)
class _Frame:
    """A mapping or sequence being built."""

    value: Any  # dict or list
    is_mapping: bool
    anchor: str | None
    start: Any  # the yaml Mark where it starts, for error messages
    tag: str | None = None
    key: Any = None  # mappings: the key read, waiting for its value
    has_key: bool = False
    size: int = 1  # nodes, aliases expanded
    merges: list[Any] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Anchor:
    """What an anchor names: the object, and how many nodes it expands to (``None`` while still open)."""

    value: Any
    size: int | None


def yaml_reason(exc: yaml.YAMLError) -> str:
    """Return a one-line reason with the line and column, instead of PyYAML's multi-line text."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem or exc.context} (line {mark.line + 1}, column {mark.column + 1})"
    return str(exc).replace("\n", " ")


def documents(stream: TextIO | str) -> Iterator[Any]:
    """Yield the documents of a YAML stream, one at a time, as ``yaml.safe_load_all`` would.

    Raises :class:`Unreadable` for nesting or aliases beyond the bounds above,
    ``yaml.YAMLError`` for what is not YAML, and whatever reading ``stream``
    raises (``OSError``, ``UnicodeDecodeError``).
    """
    loader = _LOADER(stream)
    try:
        yield from _Builder(loader).documents()
    finally:
        loader.dispose()


class _Builder:
    """Builds Python objects from a loader's events with an explicit stack (see the module docstring)."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self._loader = loader
        # PyYAML's own resolver and safe constructors (untyped in types-PyYAML), for scalars only.
        self._resolve = cast("Callable[[type, str, tuple[bool, bool]], str]", loader.resolve)
        self._constructors = cast("dict[str | None, Callable[[Any, ScalarNode], Any]]", loader.yaml_constructors)
        self._alias_nodes = 0  # nodes added by expanding aliases, over the whole input
        self._anchors: dict[str, _Anchor] = {}
        self._stack: list[_Frame] = []

    def documents(self) -> Iterator[Any]:
        """Yield each document of the stream."""
        get_event: Callable[[], Any] = cast("Any", self._loader.get_event)  # untyped in types-PyYAML
        scalar_event, alias_event = events.ScalarEvent, events.AliasEvent
        mapping_start, sequence_start = events.MappingStartEvent, events.SequenceStartEvent
        mapping_end, sequence_end = events.MappingEndEvent, events.SequenceEndEvent
        document_start, document_end = events.DocumentStartEvent, events.DocumentEndEvent
        stream_end = events.StreamEndEvent
        stack = self._stack
        plain_strings = not _ANY_START_RESOLVES  # a plain scalar may be a string by its first character
        root: Any = None
        while True:
            event = get_event()
            kind = type(event)
            value: Any
            if kind is scalar_event:
                text = event.value
                if event.tag is None and (
                    not event.implicit[0] or (plain_strings and text and text[0] not in _RESOLVABLE)
                ):
                    value = text  # the common case, without PyYAML's resolver: a quoted or plain string
                else:
                    value = self._scalar(event)
                size = 1
                if event.anchor is not None:
                    self._define(event.anchor, value, 1, event)
            elif kind is mapping_start or kind is sequence_start:
                if event.tag is None and event.anchor is None and len(stack) < MAX_DEPTH:
                    is_mapping = kind is mapping_start  # the common case, inline: no tag, no anchor
                    stack.append(_Frame({} if is_mapping else [], is_mapping, None, event.start_mark))
                else:
                    self._open(event, kind is mapping_start)
                continue
            elif kind is mapping_end or kind is sequence_end:
                value, size = self._close()
            elif kind is alias_event:
                value, size = self._alias(event)
            elif kind is document_start:
                root = None
                self._anchors = {}
                continue
            elif kind is document_end:
                yield root
                continue
            elif kind is stream_end:
                return
            else:  # StreamStartEvent
                continue
            if not stack:
                root = value
                continue
            frame = stack[-1]  # put the finished node into the collection being built
            frame.size += size
            if not frame.is_mapping:
                frame.value.append(value)
            elif not frame.has_key:
                if type(value) in (dict, list, set):
                    raise ConstructorError(
                        "while constructing a mapping", frame.start, "found unhashable key", event.start_mark
                    )
                frame.key, frame.has_key = value, True
            else:
                key, frame.key, frame.has_key = frame.key, None, False
                if key is _MERGE_KEY:
                    self._merge(frame, value, event)
                else:
                    frame.value[key] = value

    def _scalar(self, event: Any) -> Any:
        """Return a scalar's value, resolved and constructed as PyYAML's safe loader does."""
        tag = event.tag
        value: str = event.value
        if tag is None or tag == "!":
            if not event.implicit[0]:  # quoted, or a block scalar: a string
                return value
            if value and value[0] not in _RESOLVABLE and not _ANY_START_RESOLVES:
                return value
            tag = self._resolve(ScalarNode, value, event.implicit)
        if tag in (_STR, _VALUE):  # `=` (a "value" key) is read as the string it is
            return value
        if tag == _MERGE:
            return _MERGE_KEY
        construct = self._constructors.get(tag, self._constructors[None])
        try:
            return construct(self._loader, ScalarNode(tag, value, event.start_mark, event.end_mark, event.style))
        except ValueError as exc:  # int() beyond Python's 4300 digits, a timestamp on February 30th
            shown = value if len(value) <= 40 else f"{value[:20]}…({len(value)} characters)"
            raise Unreadable(f"the value {shown!r} cannot be read (line {event.start_mark.line + 1}): {exc}") from None

    def _open(self, event: Any, is_mapping: bool) -> None:
        """Start a mapping or sequence."""
        tag = event.tag if event.tag not in (None, "!") else None
        allowed = (_MAP, _SET) if is_mapping else (_SEQ,)
        if tag is not None and tag not in allowed:
            raise ConstructorError(
                None, None, f"could not determine a constructor for the tag {tag!r}", event.start_mark
            )
        if len(self._stack) >= MAX_DEPTH:
            raise Unreadable(f"nesting deeper than {MAX_DEPTH} levels (line {event.start_mark.line + 1})")
        value: dict[Any, Any] | list[Any] = {} if is_mapping else []
        if event.anchor is not None:
            self._define(event.anchor, value, None, event)
        self._stack.append(_Frame(value, is_mapping, event.anchor, event.start_mark, tag))

    def _close(self) -> tuple[Any, int]:
        """End the innermost mapping or sequence; return it and its expanded size."""
        frame = self._stack.pop()
        value = frame.value
        for source in frame.merges:  # explicit keys win; earlier merged mappings win over later ones
            for key, item in source.items():
                value.setdefault(key, item)
        if frame.tag == _SET:
            value = set(value)
        if frame.anchor is not None:
            self._anchors[frame.anchor] = _Anchor(value, frame.size)
        return value, frame.size

    def _alias(self, event: Any) -> tuple[Any, int]:
        """Return what an alias names, counting the nodes it adds against :data:`MAX_ALIAS_NODES`."""
        anchor = self._anchors.get(event.anchor)
        if anchor is None:
            raise yaml.composer.ComposerError(None, None, f"found undefined alias {event.anchor!r}", event.start_mark)
        if anchor.size is None:
            raise Unreadable(
                f"the alias *{event.anchor} refers to a collection that contains it"
                f" (line {event.start_mark.line + 1}): a recursive structure"
            )
        self._alias_nodes += anchor.size - 1
        if self._alias_nodes > MAX_ALIAS_NODES:
            raise Unreadable(
                f"its aliases expand to more than {MAX_ALIAS_NODES:,} nodes"
                f" (line {event.start_mark.line + 1}): an alias bomb?"
            )
        return anchor.value, anchor.size

    def _define(self, name: str, value: Any, size: int | None, event: Any) -> None:
        """Register an anchor; a second one of the same name in a document is an error, as in PyYAML."""
        if name in self._anchors:
            raise yaml.composer.ComposerError(None, None, f"found duplicate anchor {name!r}", event.start_mark)
        self._anchors[name] = _Anchor(value, size)

    def _merge(self, frame: _Frame, value: Any, event: Any) -> None:
        """Record the mappings a ``<<`` key names, to merge when the mapping ends."""
        sources = value if isinstance(value, list) else [value]
        if not all(isinstance(source, dict) for source in sources):
            raise ConstructorError(
                "while constructing a mapping",
                frame.start,
                "expected a mapping or list of mappings for merging",
                event.start_mark,
            )
        frame.merges.extend(sources)

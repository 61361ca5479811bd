"""The end-to-end harness's own log filter (tests/e2e_harness.py): what it lets through."""

from __future__ import annotations

from tests.e2e_harness import LOG_PROBLEMS, without_gevent_2130

GEVENT_2130 = [
    "Exception ignored in thread started by <bound method Thread._bootstrap of <Thread(graceful-sampler, started"
    " daemon 139985275438784)>>:",
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.13/threading.py", line 1045, in _bootstrap_inner',
    "    self._delete()",
    '  File "/usr/lib/python3.13/threading.py", line 1050, in _delete',
    "    del _active[get_ident()]",
    "KeyError: 139985292582016",
]


#: The same KeyError as gevent prints it, from the greenlet that ran the thread.
GEVENT_2130_GREENLET = [
    "Traceback (most recent call last):",
    '  File "src/gevent/greenlet.py", line 900, in gevent._gevent_cgreenlet.Greenlet.run',
    '  File "/usr/lib/python3.13/threading.py", line 1014, in _bootstrap',
    "    self._bootstrap_inner()",
    '  File "/usr/lib/python3.13/threading.py", line 1052, in _delete',
    "    del _active[get_ident()]",
    "KeyError: 139949239219552",
    "2025-08-17T00:57:20Z <Greenlet at 0x7f4878b0b560: <bound method Thread._bootstrap of <Thread(graceful-sampler,"
    " stopped daemon 139949239219552)>>> failed with KeyError",
]


class TestWithoutGevent2130:
    def test_drops_the_block_of_gevents_issue(self) -> None:
        """gevent's KeyError block from threading's _delete() goes; the lines around it stay."""
        lines = ["before", *GEVENT_2130, "after"]
        assert without_gevent_2130(lines) == ["before", "after"]

    def test_drops_the_block_as_gevent_prints_it(self) -> None:
        """The greenlet's form of the same KeyError, and gevent's "failed with KeyError" line after it, go."""
        assert without_gevent_2130(["before", *GEVENT_2130_GREENLET, "after"]) == ["before", "after"]

    def test_keeps_any_other_traceback(self) -> None:
        """A thread's traceback that does not end in _delete()'s KeyError is kept, so LOG_PROBLEMS finds it."""
        other = [*GEVENT_2130[:4], "ValueError: boom"]
        kept = without_gevent_2130(other)
        assert kept == other and [line for line in kept if LOG_PROBLEMS.search(line)] == [other[1]]

    def test_keeps_a_keyerror_from_elsewhere(self) -> None:
        """The same opening and a KeyError, but not from _delete(): kept."""
        other = [GEVENT_2130[0], "Traceback (most recent call last):", '  File "app.py", line 3, in run', "KeyError: 7"]
        assert without_gevent_2130(other) == other

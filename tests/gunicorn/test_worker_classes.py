"""Unit tests of graceful.gunicorn.worker_classes: which classes graceful supports, and the refusal."""

from __future__ import annotations

from typing import Any

import pytest
from gunicorn.workers.base import Worker
from gunicorn.workers.ggevent import GeventPyWSGIWorker, GeventWorker
from gunicorn.workers.gthread import ThreadWorker
from gunicorn.workers.sync import SyncWorker

from graceful.gunicorn.adapter.arbiter import ArbiterAdapter
from graceful.gunicorn.worker_classes import refuse_unsupported, worker_kind


class Pidfile:
    def __init__(self) -> None:
        self.unlinked = False

    def unlink(self) -> None:
        self.unlinked = True


class Cfg:
    def __init__(self, setting: str) -> None:
        self.worker_class_str = setting


class Server:
    """The parts of Gunicorn's Arbiter the refusal reads."""

    def __init__(self, worker_class: type, setting: str, pidfile: Pidfile | None) -> None:
        self.worker_class = worker_class
        self.cfg = Cfg(setting)
        self.pidfile = pidfile


class MySyncWorker(SyncWorker):
    """A subclass of a supported class: refused too (graceful cannot know what it changed)."""


class TestWorkerKind:
    @pytest.mark.parametrize(
        ("cls", "kind"), [(SyncWorker, "sync"), (ThreadWorker, "gthread"), (GeventWorker, "gevent")]
    )
    def test_supported_classes(self, cls: type, kind: str) -> None:
        """Gunicorn's sync, gthread and gevent workers, as classes or instances' types."""
        assert worker_kind(cls) == kind

    @pytest.mark.parametrize("cls", [GeventPyWSGIWorker, MySyncWorker, Worker])
    def test_others_are_not(self, cls: type) -> None:
        """gevent's pywsgi worker, a subclass, Gunicorn's base class: not supported."""
        assert worker_kind(cls) is None


class TestRefuseUnsupported:
    def test_refused_with_one_line_naming_it_and_the_pidfile_removed(self) -> None:
        """An unsupported class: RuntimeError naming it, its -k value and the supported ones; pidfile removed."""
        pidfile = Pidfile()
        server: Any = Server(GeventPyWSGIWorker, "gevent_pywsgi", pidfile)
        with pytest.raises(RuntimeError) as refused:
            refuse_unsupported(ArbiterAdapter(server))
        assert str(refused.value) == (
            "graceful: Gunicorn worker class gunicorn.workers.ggevent.GeventPyWSGIWorker (-k gevent_pywsgi)"
            " is not supported; use one of: sync, gthread, gevent, asgi, uvicorn_worker.UvicornWorker,"
            " uvicorn.workers.UvicornWorker"
        )
        assert pidfile.unlinked

    def test_without_a_pidfile(self) -> None:
        """No pidfile configured: refused all the same."""
        server: Any = Server(MySyncWorker, "tests.x:MySyncWorker", None)
        with pytest.raises(RuntimeError, match=r"test_worker_classes\.MySyncWorker \(-k tests\.x:MySyncWorker\)"):
            refuse_unsupported(ArbiterAdapter(server))

    @pytest.mark.parametrize("cls", [SyncWorker, ThreadWorker, GeventWorker])
    def test_supported_ones_pass(self, cls: type) -> None:
        """A supported class is let through and the pidfile stays."""
        pidfile = Pidfile()
        refuse_unsupported(ArbiterAdapter(Server(cls, "whatever", pidfile)))
        assert not pidfile.unlinked

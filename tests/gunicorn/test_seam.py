"""The seam: only graceful.gunicorn.adapter touches Gunicorn's internals or imports Gunicorn.

Read from the code (its syntax tree, so docstrings and comments may name
what they explain): an attribute of Gunicorn's arbiter or workers used
anywhere else in graceful, or an import of ``gunicorn``, fails here with
the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "graceful"
ADAPTER = PACKAGE / "gunicorn" / "adapter"

#: Attributes of Gunicorn's Arbiter and workers that graceful uses (and their private parts).
INTERNALS = {
    # the arbiter
    "WORKERS",
    "LISTENERS",
    "SIG_QUEUE",
    "reexec_pid",
    "master_pid",
    "kill_workers",
    "reap_workers",
    "murder_workers",
    "handle_term",
    "handle_hup",
    "handle_ttou",
    "reexec",
    "wakeup",
    "halt",
    "pidfile",
    "worker_class_str",
    "env_orig",
    "error_log",
    # a worker
    "alive",
    "handle_exit",
    "nr",
    "nr_conns",
    "worker_connections",
    "method_queue",
    "poller",
    "wsgi",
    "cfg",
    # the ASGI workers (-k asgi, Uvicorn's): their servers, requests and Uvicorn's Server
    "servers",
    "must_close",
    "server_state",
    "should_exit",
    "limit_max_requests",
    "timeout_graceful_shutdown",
    # HTTP/2 (Gunicorn 27+): the config, the parser factory, HTTP2ServerConnection and its h2 connection
    "http_protocols",
    "get_parser",
    "streams",
    "pending_requests",
    "client_addr",
    "h2_conn",
    "is_closed",
    "cleanup_stream",
    "_handle_event",
    "highest_inbound_stream_id",
}


#: Uvicorn's names among them: graceful/uvicorn/adapter.py, Uvicorn's own seam (graceful serve's, which
#: Gunicorn's Uvicorn worker adapter reuses), touches them on Uvicorn's Server, never on Gunicorn's.
UVICORN_SEAM = Path("uvicorn") / "adapter.py"
UVICORN_NAMES = {"servers", "server_state", "should_exit", "timeout_graceful_shutdown"}


def modules_outside_the_adapter() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if ADAPTER not in p.parents)


def uses_of_internals(source: str, where: str) -> list[str]:
    """Each use of a Gunicorn internal or import of gunicorn in ``source``, as ``where:line name``."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        name = None
        if isinstance(node, ast.Attribute) and node.attr in INTERNALS:
            name = node.attr
        elif isinstance(node, ast.Import):
            name = next((a.name for a in node.names if a.name.split(".")[0] == "gunicorn"), None)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "gunicorn":
            name = node.module
        if name is not None:
            found.append(f"{where}:{node.lineno} {name}")
    return sorted(found)


class TestSeam:
    def test_nothing_outside_the_adapter_touches_gunicorns_internals(self) -> None:
        """Every contact with Gunicorn goes through graceful.gunicorn.adapter."""
        modules = modules_outside_the_adapter()
        assert len(modules) > 50  # the whole package is read, not an empty glob
        found = [use for path in modules for use in uses_of_internals(path.read_text(), str(path.relative_to(PACKAGE)))]
        uvicorn_seam = f"{UVICORN_SEAM}:"
        found = [use for use in found if not (use.startswith(uvicorn_seam) and use.split()[-1] in UVICORN_NAMES)]
        assert found == []

    def test_the_check_finds_each_kind_of_use(self) -> None:
        """The check itself: an import of gunicorn, a from-import, and an internal attribute are each caught."""
        source = "import gunicorn.arbiter\nfrom gunicorn import systemd\n\ndef f(server):\n    return server.WORKERS\n"
        assert uses_of_internals(source, "x.py") == ["x.py:1 gunicorn.arbiter", "x.py:2 gunicorn", "x.py:5 WORKERS"]

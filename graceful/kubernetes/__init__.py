"""``graceful check``: find the Kubernetes settings that make a graceful pod lose requests.

Runs only in the ``graceful check`` command, never in a serving process. A
container is checked when it runs graceful: it sets a ``GRACEFUL_*`` variable,
or its command (or ``GUNICORN_CMD_ARGS``) names ``graceful/conf.py``,
``python:graceful.conf`` or ``-m graceful``.

- :mod:`.loading` reads files; :mod:`.manifests` finds pod specs, containers, probes and hooks in them
- :mod:`.settings` a container's ``GRACEFUL_*`` values, validated as graceful does at start-up
- :mod:`.subject` what a rule looks at; :mod:`.rules` the rules, one module per concern
- :mod:`.findings` what is reported; :mod:`.checker` runs the rules; :mod:`.command` the CLI
"""

from __future__ import annotations

from graceful.kubernetes.checker import check_documents
from graceful.kubernetes.findings import Finding, Severity

__all__ = ["Finding", "Severity", "check_documents"]

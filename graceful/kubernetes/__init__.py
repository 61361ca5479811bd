"""``graceful check``: find the Kubernetes settings that make a graceful pod lose requests.

Runs only in the ``graceful check`` command, never in a serving process. A
container is checked when it runs graceful: it sets a ``GRACEFUL_*`` variable,
or its command (or ``GUNICORN_CMD_ARGS``) names ``graceful/conf.py``,
``python:graceful.conf`` (or Django's ``graceful.django.conf``) or ``-m graceful``.

- :mod:`.loading` reads YAML within bounds; :mod:`.manifests` keeps what the rules need of each object
- :mod:`.settings` a container's ``GRACEFUL_*`` values, validated as graceful does at start-up
- :mod:`.traffic` where a pod's traffic comes from; :mod:`.sidecars` the sidecars that stop with it
- :mod:`.subject` what a rule looks at; :mod:`.rules` the rules, one module per concern, with their reasons
- :mod:`.findings` what is reported; :mod:`.checker` runs the rules; :mod:`.command` the CLI
"""

from __future__ import annotations

from graceful.kubernetes.checker import check_documents
from graceful.kubernetes.findings import Finding, Severity
from graceful.kubernetes.manifests import ManifestError

__all__ = ["Finding", "ManifestError", "Severity", "check_documents"]

"""Hostile and broken manifests, generated: shared by the tests and bench/check_inputs.py.

Each function returns YAML text (or writes it, for the big one), so that no
large or deep file has to live in the repository.
"""

from __future__ import annotations

import itertools
from pathlib import Path

#: One small graceful Pod, about 290 bytes: 69,242 of them make the 20 MB of issue 17.
_POD = """apiVersion: v1
kind: Pod
metadata: {{name: web-{index:06d}}}
spec:
  containers:
  - name: app
    image: app:1
    command: [gunicorn, -c, python:graceful.conf, app:app]
    env: [{{name: GRACEFUL_SHUTDOWN_DELAY, value: "5"}}]
    readinessProbe: {{httpGet: {{path: /readyz, port: 8000}}}}
---
"""

#: The number of documents in the 20 MB manifest of issue 17.
BIG_DOCUMENTS = 69_242


def write_big_manifest(path: Path, documents: int = BIG_DOCUMENTS) -> int:
    """Write ``documents`` graceful Pods to ``path`` (20 MB for the default); return the size in bytes."""
    with path.open("w", encoding="utf-8") as stream:
        for index in range(documents):
            stream.write(_POD.format(index=index))
    return path.stat().st_size


def deep_nesting(depth: int = 10_000) -> str:
    """Return ``a: [[[...]]]`` nested ``depth`` lists deep (PyYAML's composer recursed once per level)."""
    return "a: " + "[" * depth + "]" * depth + "\n"


def deep_block_nesting(depth: int) -> str:
    """Return ``- - - ... x``: ``depth`` block sequences nested on one line (libyaml limits only flow nesting)."""
    return "- " * depth + "x\n"


def alias_bomb_in_container(levels: int = 9, width: int = 9) -> str:
    """Return a Pod whose container's ``args`` is a "billion laughs": ``width ** levels`` strings when expanded."""
    names = [chr(ord("a") + level) for level in range(levels)]
    anchors = ["  a: &a [" + ", ".join(['"lol"'] * width) + "]"]
    for previous, name in itertools.pairwise(names):
        anchors.append(f"  {name}: &{name} [" + ", ".join([f"*{previous}"] * width) + "]")
    return (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bomb}\nx-anchors:\n"
        + "\n".join(anchors)
        + "\nspec:\n  containers:\n  - name: app\n    image: app:1\n"
        + "    command: [gunicorn, -c, python:graceful.conf, app:app]\n"
        + f"    args: *{names[-1]}\n"
    )


def pre_stop_sleep(seconds: str) -> str:
    """Return a graceful Pod whose preStop hook is the sleep action with ``seconds`` as written."""
    return (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - name: app\n    image: app:1\n"
        "    command: [gunicorn, -c, python:graceful.conf, app:app]\n"
        f"    lifecycle: {{preStop: {{sleep: {{seconds: {seconds}}}}}}}\n"
    )


def pre_stop_exec_sleep(argument: str) -> str:
    """Return a graceful Pod whose preStop hook runs ``sleep ARGUMENT``."""
    return (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - name: app\n    image: app:1\n"
        "    command: [gunicorn, -c, python:graceful.conf, app:app]\n"
        f'    lifecycle: {{preStop: {{exec: {{command: [sleep, "{argument}"]}}}}}}\n'
    )

"""``graceful check [FILE...]``: the command line of the Kubernetes checker.

Exit status: 0 when there is no error finding, 1 when there is one, 2 when an
input cannot be read (or for a usage error). Findings go to standard output,
one line each (or one JSON document with ``--format json``); the summary and
unreadable inputs go to standard error.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from graceful._args import seconds
from graceful.kubernetes.checker import ENDPOINT_PROPAGATION, check
from graceful.kubernetes.findings import Finding
from graceful.kubernetes.loading import Unreadable, load

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    """Return the parser for ``graceful check``'s arguments."""
    parser = argparse.ArgumentParser(
        prog="graceful check",
        description="Check Kubernetes manifests (kubectl YAML, `helm template` output) for the"
        " settings that make a graceful pod lose requests.",
        epilog="Exit status: 0 no error, 1 an error-severity finding, 2 an unreadable input.",
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="manifest files; - reads standard input (the default)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.add_argument(
        "--propagation",
        type=seconds,
        default=ENDPOINT_PROPAGATION,
        metavar="SECONDS",
        help="seconds allowed for an endpoint change to reach every node and load balancer"
        f" (default {ENDPOINT_PROPAGATION:g})",
    )
    return parser


def _write_text(out: TextIO, err: TextIO, findings: Sequence[Finding], checked: int, read: int) -> None:
    """Print one line per finding, then a summary on standard error."""
    for finding in findings:
        print(finding.line(), file=out)
    if not read:  # every input was unreadable, and said so already
        return
    if not checked:
        print(
            "graceful check: no container runs graceful (set a GRACEFUL_* variable, or run Gunicorn"
            " with -c python:graceful.conf)",
            file=err,
        )
        return
    counts = {severity: sum(f.severity == severity for f in findings) for severity in ("error", "warning", "info")}
    print(
        f"graceful check: {checked} container(s) checked: {counts['error']} error(s),"
        f" {counts['warning']} warning(s), {counts['info']} info",
        file=err,
    )


def _write_json(out: TextIO, findings: Sequence[Finding], checked: int, unreadable: Sequence[str]) -> None:
    """Print one JSON document: ``containers_checked``, ``findings`` and ``unreadable`` inputs."""
    report = {
        "containers_checked": checked,
        "findings": [dataclasses.asdict(finding) for finding in findings],
        "unreadable": list(unreadable),
    }
    json.dump(report, out, indent=2)
    out.write("\n")


def _exit_status(exc: SystemExit) -> int:
    """Return argparse's exit status (0 after --help, 2 after a usage error) as an int."""
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``graceful check [FILE...]``; return 0 (clean), 1 (an error finding) or 2 (unreadable input)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits on --help and on usage errors; we return instead
        return _exit_status(exc)
    paths: list[str] = args.files or ["-"]
    if paths == ["-"] and not args.files and sys.stdin.isatty():
        print(
            "graceful check: no FILE given and standard input is a terminal (try: - or a file)",
            file=sys.stderr,
        )
        return 2
    checked = read = 0
    findings: list[Finding] = []
    unreadable: list[str] = []
    for path in paths:
        try:
            source, docs = load(path)
        except Unreadable as exc:
            unreadable.append(str(exc))
            print(f"graceful check: {exc}", file=sys.stderr)
            continue
        count, found = check(docs, source, args.propagation)
        read += 1
        checked += count
        findings.extend(found)
    if args.format == "json":
        _write_json(sys.stdout, findings, checked, unreadable)
    else:
        _write_text(sys.stdout, sys.stderr, findings, checked, read)
    if unreadable:
        return 2
    return 1 if any(finding.severity == "error" for finding in findings) else 0

"""``graceful check [FILE...]``: the command line of the Kubernetes checker.

Exit status: 0 when there is no error finding, 1 when there is one, 2 when an
input cannot be read or is not a manifest Kubernetes would accept (and for a
usage error). Findings go to standard output, one line each (or one JSON
document with ``--format json``); the summary and each unreadable input, one
line naming the file and the problem, go to standard error. No input makes
it print a traceback: reading is bounded (:mod:`graceful.kubernetes.loading`)
and numbers are checked against what Kubernetes accepts
(:mod:`graceful.kubernetes.manifests`).

All inputs are read before any is checked, so a Service in one file tells
where the traffic of a Deployment in another comes from.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import TextIO

import yaml

from graceful._args import seconds
from graceful.kubernetes.checker import check
from graceful.kubernetes.findings import Finding
from graceful.kubernetes.loading import Unreadable, documents, yaml_reason
from graceful.kubernetes.manifests import Inventory, ManifestError
from graceful.kubernetes.traffic import ALLOWANCES, CASES

__all__ = ["main"]

_AUTO = "auto"


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
    figures = ", ".join(f"{case} {ALLOWANCES[case]:g}s" for case in CASES)
    parser.add_argument(
        "--traffic",
        choices=(_AUTO, *CASES),
        default=_AUTO,
        help="where the pods' traffic comes from: in-cluster (kube-proxy, ingress controllers), probe (a"
        " balancer that health-checks /readyz itself), aws or gce (load balancers that target pod IPs);"
        " auto (the default) reads it from the Services and Ingresses given",
    )
    parser.add_argument(
        "--propagation",
        type=seconds,
        default=None,
        metavar="SECONDS",
        help=f"measured seconds new requests keep arriving after a pod is deleted, instead of the figure for"
        f" its traffic ({figures}; for probe: after the balancer's check has failed)",
    )
    return parser


def _read(path: str) -> tuple[str, Inventory]:
    """Return an input's name for findings and what it holds; raise :class:`Unreadable` saying why."""
    source = "<stdin>" if path == "-" else path
    inventory = Inventory()
    try:
        if path == "-":
            _add_all(inventory, sys.stdin, source)
        else:
            with open(path, encoding="utf-8") as stream:
                _add_all(inventory, stream, source)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise Unreadable(f"cannot read {source}: {reason}") from None
    except yaml.YAMLError as exc:
        raise Unreadable(f"{source} is not valid YAML: {yaml_reason(exc)}") from None
    except (Unreadable, ManifestError) as exc:
        raise Unreadable(f"{source}: {exc}") from None
    return source, inventory


def _add_all(inventory: Inventory, stream: TextIO, source: str) -> None:
    """Add every document of a stream to the inventory, one at a time."""
    for doc in documents(stream):
        inventory.add(doc, source)


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
    inventory = Inventory()
    read = 0
    unreadable: list[str] = []
    for path in paths:
        try:
            _, part = _read(path)
        except Unreadable as exc:
            unreadable.append(str(exc))
            print(f"graceful check: {exc}", file=sys.stderr)
            continue
        inventory.extend(part)
        read += 1
    traffic = None if args.traffic == _AUTO else args.traffic
    checked, findings = check(inventory, traffic=traffic, propagation=args.propagation)
    if args.format == "json":
        _write_json(sys.stdout, findings, checked, unreadable)
    else:
        _write_text(sys.stdout, sys.stderr, findings, checked, read)
    if unreadable:
        return 2
    return 1 if any(finding.severity == "error" for finding in findings) else 0

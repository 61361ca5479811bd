"""Tests for ``graceful check``: one manifest per finding lives in ``tests/manifests/``."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from graceful.check import ENDPOINT_PROPAGATION, Finding, check_documents, main

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = Path(__file__).resolve().parent / "manifests"
EXAMPLES = ROOT / "examples" / "kubernetes"
KUBERNETES_VERSION = "1.30"

#: A clean container; the variant tests below change one thing in a copy of it.
CLEAN_CONTAINER: dict[str, Any] = {
    "name": "app",
    "image": "registry.example.com/app:1.0",
    "command": ["gunicorn", "-c", "python:graceful.conf", "--bind", "0.0.0.0:8000", "app:app"],
    "env": [{"name": "GRACEFUL_SHUTDOWN_DELAY", "value": "5"}],
    "readinessProbe": {
        "httpGet": {"path": "/readyz", "port": 8000},
        "periodSeconds": 1,
        "failureThreshold": 2,
        "timeoutSeconds": 1,
    },
    "livenessProbe": {"httpGet": {"path": "/livez", "port": 8000}},
}


def container(**changes: Any) -> dict[str, Any]:
    """Return a copy of the clean container with some fields replaced (``None`` removes one)."""
    result = copy.deepcopy(CLEAN_CONTAINER)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """Return a Pod holding the containers, with extra pod spec fields."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": list(containers), **spec},
    }


def env(**values: str) -> list[dict[str, str]]:
    """Return an env list from keyword arguments."""
    return [{"name": name, "value": value} for name, value in values.items()]


def codes_of(*docs: Any) -> list[str]:
    """Return the codes found in some parsed documents, in order."""
    return [finding.code for finding in check_documents(docs, "test")]


def findings_in(name: str) -> list[Finding]:
    """Return the findings of a manifest under tests/manifests/."""
    path = MANIFESTS / name
    return check_documents(yaml.safe_load_all(path.read_text(encoding="utf-8")), str(path))


def codes_in(name: str) -> list[str]:
    """Return the codes found in a manifest under tests/manifests/."""
    return [finding.code for finding in findings_in(name)]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``main`` and return its exit status, standard output and standard error."""
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


class _Terminal(io.StringIO):
    """Standard input that claims to be a terminal."""

    def isatty(self) -> bool:
        """Say yes, like an interactive shell's standard input."""
        return True


class TestCleanManifests:
    """Manifests with every setting right have no finding."""

    def test_clean_manifest(self) -> None:
        """The clean test manifest has no finding."""
        assert codes_in("clean.yaml") == []

    def test_examples_have_no_finding(self) -> None:
        """Every manifest in examples/kubernetes/ has no finding at all, not even info."""
        for path in sorted(EXAMPLES.glob("*.yaml")):
            docs = yaml.safe_load_all(path.read_text(encoding="utf-8"))
            assert check_documents(docs, str(path)) == [], path

    def test_examples_exit_zero(self, capsys: pytest.CaptureFixture[str]) -> None:
        """``graceful check examples/kubernetes/*.yaml`` exits 0 and checks one container."""
        paths = [str(path) for path in sorted(EXAMPLES.glob("*.yaml"))]
        status, out, err = run(capsys, *paths)
        assert (status, out) == (0, "")
        assert "1 container(s) checked: 0 error(s), 0 warning(s), 0 info" in err

    def test_example_budget_matches_grace_period(self) -> None:
        """The example's terminationGracePeriodSeconds equals its budget and GRACEFUL_GRACE_PERIOD."""
        (deployment,) = yaml.safe_load_all((EXAMPLES / "deployment.yaml").read_text(encoding="utf-8"))
        spec = deployment["spec"]["template"]["spec"]
        env = {item["name"]: item["value"] for item in spec["containers"][0]["env"]}
        values = {name: float(env[name]) for name in env if name != "GRACEFUL_HEALTH_BIND"}
        budget = (
            max(values["GRACEFUL_SHUTDOWN_DELAY"], values["GRACEFUL_HOOK_TIMEOUT"])
            + values["GRACEFUL_DRAIN_TIMEOUT"]
            + values["GRACEFUL_HOOK_TIMEOUT"]
            + 1
        )
        assert budget == spec["terminationGracePeriodSeconds"] == values["GRACEFUL_GRACE_PERIOD"]


class TestNoReadinessProbe:
    """GC001: a graceful container without a readiness probe."""

    def test_manifest(self) -> None:
        """The GC001 manifest has exactly GC001, an error."""
        findings = findings_in("gc001-no-readiness-probe.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC001", "error")]

    def test_no_delay_finding_without_a_probe(self) -> None:
        """Without a probe to size it from, the delay is not reported too (GC004)."""
        assert codes_of(pod(container(readinessProbe=None))) == ["GC001"]


class TestReadinessProbeNotOnReadyz:
    """GC002: a readiness probe that keeps passing during shutdown."""

    def test_manifest_other_path(self) -> None:
        """A readiness probe on /healthz is GC002, a warning naming the path."""
        (finding,) = findings_in("gc002-readiness-path.yaml")
        assert (finding.code, finding.severity) == ("GC002", "warning")
        assert "/healthz" in finding.message

    def test_manifest_tcp_socket(self) -> None:
        """A tcpSocket readiness probe is GC002, naming the probe type."""
        (finding,) = findings_in("gc002-readiness-tcp.yaml")
        assert finding.code == "GC002"
        assert "tcpSocket" in finding.message

    def test_exec_probe(self) -> None:
        """An exec readiness probe is GC002."""
        probe = {"exec": {"command": ["true"]}, "periodSeconds": 1, "failureThreshold": 2}
        assert codes_of(pod(container(readinessProbe=probe))) == ["GC002"]

    def test_excluding_the_shutdown_check(self) -> None:
        """/readyz?exclude=shutdown never fails on shutdown: GC002."""
        probe = copy.deepcopy(CLEAN_CONTAINER["readinessProbe"])
        probe["httpGet"]["path"] = "/readyz?exclude=shutdown"
        assert codes_of(pod(container(readinessProbe=probe))) == ["GC002"]

    @pytest.mark.parametrize("path", ["/readyz", "/readyz?verbose", "/readyz/shutdown", "/readyz/"])
    def test_readyz_variants_pass(self, path: str) -> None:
        """Paths that fail on shutdown (/readyz, ?verbose, /readyz/shutdown) are fine."""
        probe = copy.deepcopy(CLEAN_CONTAINER["readinessProbe"])
        probe["httpGet"]["path"] = path
        assert codes_of(pod(container(readinessProbe=probe))) == []

    def test_missing_path_is_root(self) -> None:
        """An httpGet probe without a path probes / (Kubernetes' default): GC002."""
        probe = copy.deepcopy(CLEAN_CONTAINER["readinessProbe"])
        del probe["httpGet"]["path"]
        (finding,) = check_documents([pod(container(readinessProbe=probe))], "test")
        assert finding.code == "GC002"
        assert "on /," in finding.message


class TestLivenessOnReadyz:
    """GC003: a liveness probe on /readyz restarts the container mid-drain."""

    def test_manifest(self) -> None:
        """The GC003 manifest has exactly GC003, an error, with the probe's timing."""
        (finding,) = findings_in("gc003-liveness-on-readyz.yaml")
        assert (finding.code, finding.severity) == ("GC003", "error")
        assert "periodSeconds 10 x failureThreshold 3 = 30s" in finding.message

    def test_no_liveness_probe(self) -> None:
        """No liveness probe at all is fine."""
        assert codes_of(pod(container(livenessProbe=None))) == []

    def test_liveness_on_readyz_subpath(self) -> None:
        """/readyz/shutdown fails on shutdown too: GC003."""
        probe = {"httpGet": {"path": "/readyz/shutdown", "port": 8000}}
        assert codes_of(pod(container(livenessProbe=probe))) == ["GC003"]


class TestShutdownDelay:
    """GC004: the delay ends before the readiness failure has reached every node."""

    def test_manifest(self) -> None:
        """Default probe timing needs 10 x 3 + 1 + 2 = 33s; 5s is GC004, an error, with the numbers."""
        (finding,) = findings_in("gc004-delay-too-short.yaml")
        assert (finding.code, finding.severity) == ("GC004", "error")
        assert "= 33s" in finding.message
        assert "for up to 28s" in finding.message
        assert "reach a closed socket" in finding.message
        assert "GRACEFUL_SHUTDOWN_DELAY=33" in finding.fix

    def test_exactly_enough(self) -> None:
        """A delay equal to the probe time plus propagation is enough."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}, "periodSeconds": 2, "failureThreshold": 3}
        values = env(GRACEFUL_SHUTDOWN_DELAY=str(2 * 3 + 1 + ENDPOINT_PROPAGATION))
        assert codes_of(pod(container(readinessProbe=probe, env=values))) == []

    def test_zero_probe_fields_are_defaults(self) -> None:
        """periodSeconds: 0 is defaulted to 10 by the API server, and counted so."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}, "periodSeconds": 0, "failureThreshold": 1}
        (finding,) = check_documents([pod(container(readinessProbe=probe))], "test")
        assert "periodSeconds 10 x failureThreshold 1" in finding.message

    def test_retry_after_mode(self) -> None:
        """With send_retry_after, late requests get 429 instead of a closed socket."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}}
        values = env(GRACEFUL_SHUTDOWN_DELAY="5", GRACEFUL_SEND_RETRY_AFTER="true")
        (finding,) = check_documents([pod(container(readinessProbe=probe, env=values))], "test")
        assert finding.code == "GC004"
        assert "get 429" in finding.message

    def test_pre_stop_sleep_counts(self) -> None:
        """A preStop sleep serves before SIGTERM, so it counts towards the delay (GC006 instead)."""
        probe = {"httpGet": {"path": "/readyz", "port": 8000}}
        hook = {"preStop": {"sleep": {"seconds": 30}}}
        found = codes_of(pod(container(readinessProbe=probe, lifecycle=hook), terminationGracePeriodSeconds=60))
        assert "GC004" not in found
        assert "GC006" in found

    def test_propagation_allowance(self) -> None:
        """A larger propagation allowance makes a delay that was enough too short."""
        doc = pod(container())
        assert check_documents([doc], "test", propagation=2.0) == []
        (finding,) = check_documents([doc], "test", propagation=3.0)
        assert finding.code == "GC004"
        assert "endpoint propagation 3s = 6s" in finding.message


class TestBudget:
    """GC005: the shutdown does not fit terminationGracePeriodSeconds."""

    def test_manifest(self) -> None:
        """Budget 26s > grace period 20: GC005 (error) with the sum, and GC010 (graceful assumes 30)."""
        findings = findings_in("gc005-budget-over-grace-period.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC005", "error"), ("GC010", "warning")]
        assert "= 26s > terminationGracePeriodSeconds 20" in findings[0].message
        assert "terminationGracePeriodSeconds: 26" in findings[0].fix

    def test_default_grace_period_is_30(self) -> None:
        """Without terminationGracePeriodSeconds the pod has 30s; a 31s budget is over it."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="5", GRACEFUL_DRAIN_TIMEOUT="20", GRACEFUL_GRACE_PERIOD="31")
        found = codes_of(pod(container(env=values)))
        assert found == ["GC005", "GC010"]

    def test_pre_stop_sleep_counts(self) -> None:
        """A preStop sleep is spent from the grace period before graceful starts."""
        hook = {"preStop": {"exec": {"command": ["sleep", "10"]}}}
        (budget, *_) = check_documents([pod(container(lifecycle=hook))], "test")
        assert budget.code == "GC005"
        assert budget.message.startswith("preStop sleep 10s + ")
        assert "= 36s > terminationGracePeriodSeconds 30" in budget.message


class TestPreStopSleep:
    """GC006: a preStop sleep on top of graceful's own delay."""

    def test_manifest(self) -> None:
        """The GC006 manifest has exactly GC006, a warning, with both numbers."""
        (finding,) = findings_in("gc006-prestop-sleep.yaml")
        assert (finding.code, finding.severity) == ("GC006", "warning")
        assert "counted twice (10s)" in finding.message

    @pytest.mark.parametrize(
        ("pre_stop", "seconds"),
        [
            ({"sleep": {"seconds": 5}}, "5s"),
            ({"exec": {"command": ["/bin/sleep", "5"]}}, "5s"),
            ({"exec": {"command": ["sh", "-c", "echo bye; sleep 5s"]}}, "5s"),
            ({"exec": {"command": ["/bin/bash", "-ec", "sleep 0.5m && echo done"]}}, "30s"),
        ],
    )
    def test_sleep_forms(self, pre_stop: dict[str, Any], seconds: str) -> None:
        """The sleep action, a sleep command and a sleep in a shell script are all read, with units."""
        hook = {"preStop": pre_stop}
        doc = pod(container(lifecycle=hook), terminationGracePeriodSeconds=120)
        gc006 = [f for f in check_documents([doc], "test") if f.code == "GC006"]
        assert len(gc006) == 1
        assert f"preStop sleep {seconds} runs before SIGTERM" in gc006[0].message

    def test_no_delay_no_finding(self) -> None:
        """A preStop sleep with GRACEFUL_SHUTDOWN_DELAY=0 waits once: no GC006."""
        hook = {"preStop": {"sleep": {"seconds": 5}}}
        values = env(GRACEFUL_SHUTDOWN_DELAY="0", GRACEFUL_DRAIN_TIMEOUT="10", GRACEFUL_GRACE_PERIOD="25")
        assert codes_of(pod(container(lifecycle=hook, env=values))) == []

    def test_other_pre_stop_hooks(self) -> None:
        """A preStop hook that does not sleep is not a sleep."""
        hook = {"preStop": {"httpGet": {"path": "/drain", "port": 8000}}}
        assert codes_of(pod(container(lifecycle=hook))) == []


class TestShellForm:
    """GC007: a shell as PID 1 keeps SIGTERM from Gunicorn."""

    def test_manifest(self) -> None:
        """The GC007 manifest (command sh -c, script in args) has exactly GC007, an error."""
        (finding,) = findings_in("gc007-shell-form.yaml")
        assert (finding.code, finding.severity) == ("GC007", "error")
        assert "`sh -c` without exec" in finding.message

    @pytest.mark.parametrize(
        "command",
        [
            ["sh", "-c", "exec gunicorn -c python:graceful.conf app:app"],
            ["/bin/bash", "-c", "cd /srv && exec gunicorn -c python:graceful.conf app:app"],
            ["bash", "-o", "pipefail", "-ec", "set -u\nexec gunicorn -c python:graceful.conf app:app"],
            ["gunicorn", "-c", "python:graceful.conf", "app:app"],
            ["sh", "/entrypoint.sh"],
            ["sh", "-c"],
            ["sh", "-e", "-c", "--", "exec gunicorn -c python:graceful.conf app:app"],
        ],
    )
    def test_fine_commands(self, command: list[str]) -> None:
        """exec in the script, the exec form and a script file are not GC007."""
        assert codes_of(pod(container(command=command))) == []

    @pytest.mark.parametrize(
        "command",
        [
            ["bash", "-c", "gunicorn -c python:graceful.conf app:app"],
            ["/bin/sh", "-ec", "echo exec; gunicorn -c python:graceful.conf app:app"],
            ["bash", "-o", "pipefail", "-c", "gunicorn -c python:graceful.conf app:app | tee log"],
        ],
    )
    def test_shell_without_exec(self, command: list[str]) -> None:
        """A shell script without an exec command is GC007, whatever the options."""
        assert codes_of(pod(container(command=command))) == ["GC007"]


class TestRefusedValues:
    """GC008: a GRACEFUL_* value that graceful refuses at start-up."""

    def test_manifest(self) -> None:
        """A bad value and an unknown name are one GC008 each, errors naming the variable."""
        findings = findings_in("gc008-refused-value.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC008", "error"), ("GC008", "error")]
        assert "GRACEFUL_DRAIN_TIMEOUT='15s'" in findings[0].message
        assert findings[0].fix == "correct or remove GRACEFUL_DRAIN_TIMEOUT"
        assert "GRACEFUL_DELAY is not a graceful setting" in findings[1].message

    def test_refused_grace_period(self) -> None:
        """A refused GRACEFUL_GRACE_PERIOD is GC008; the default 30 is used for the rest."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="5", GRACEFUL_GRACE_PERIOD="0")
        assert codes_of(pod(container(env=values))) == ["GC008"]

    def test_later_entries_win(self) -> None:
        """A variable listed twice takes its last value, as in the kubelet."""
        values = env(GRACEFUL_DRAIN_TIMEOUT="soon") + env(GRACEFUL_DRAIN_TIMEOUT="10")
        assert codes_of(pod(container(env=values))) == []

    def test_checker_environment_is_ignored(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """GRACEFUL_* variables of the shell running the check do not leak into the pod's settings."""
        monkeypatch.setenv("GRACEFUL_DRAIN_TIMEOUT", "soon")
        assert codes_in("clean.yaml") == []

    def test_yaml_booleans_and_numbers(self) -> None:
        """Unquoted YAML values are read as the container sees them ("true", "5")."""
        values: list[dict[str, Any]] = [
            {"name": "GRACEFUL_SHUTDOWN_DELAY", "value": 5},
            {"name": "GRACEFUL_SEND_RETRY_AFTER", "value": True},
        ]
        assert codes_of(pod(container(env=values))) == []


class TestGracefulBudget:
    """GC009: the budget is over graceful's own grace period, so it refuses to start."""

    def test_manifest(self) -> None:
        """51s > the default 30s: GC009 (error) with graceful's message, and GC010 (info)."""
        findings = findings_in("gc009-budget-over-graceful-grace-period.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC009", "error"), ("GC010", "info")]
        assert "graceful refuses to start: graceful shutdown does not fit" in findings[0].message
        assert findings[0].fix.startswith("set GRACEFUL_GRACE_PERIOD=51 ")

    def test_not_after_a_refused_value(self) -> None:
        """When a value is refused already, the budget is not reported too."""
        values = env(GRACEFUL_DRAIN_TIMEOUT="40", GRACEFUL_HOOK_TIMEOUT="-1")
        found = codes_of(pod(container(env=values), terminationGracePeriodSeconds=60))
        assert found == ["GC008", "GC010"]


class TestGracePeriodMismatch:
    """GC010: GRACEFUL_GRACE_PERIOD disagrees with the pod's grace period."""

    def test_manifest(self) -> None:
        """GRACEFUL_GRACE_PERIOD=60 over a 30s pod is GC010, a warning, with the fix."""
        (finding,) = findings_in("gc010-grace-period-mismatch.yaml")
        assert (finding.code, finding.severity) == ("GC010", "warning")
        assert "GRACEFUL_GRACE_PERIOD grace_period 60s > terminationGracePeriodSeconds 30" in finding.message
        assert finding.fix == "set GRACEFUL_GRACE_PERIOD=30"

    def test_smaller_is_info(self) -> None:
        """A GRACEFUL_GRACE_PERIOD under the pod's is GC010, info only."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="5", GRACEFUL_GRACE_PERIOD="30")
        (finding,) = check_documents([pod(container(env=values), terminationGracePeriodSeconds=45)], "test")
        assert (finding.code, finding.severity) == ("GC010", "info")

    def test_pre_stop_sleep_is_subtracted(self) -> None:
        """The time graceful has is the grace period minus the preStop sleep."""
        hook = {"preStop": {"sleep": {"seconds": 10}}}
        values = env(GRACEFUL_SHUTDOWN_DELAY="0", GRACEFUL_DRAIN_TIMEOUT="5", GRACEFUL_GRACE_PERIOD="30")
        (finding,) = check_documents(
            [pod(container(env=values, lifecycle=hook), terminationGracePeriodSeconds=30)], "test"
        )
        assert finding.code == "GC010"
        assert "- preStop sleep 10s = 20s" in finding.message
        assert finding.fix == "set GRACEFUL_GRACE_PERIOD=20"


class TestUnreadableValues:
    """GC011: values resolved only at run time; defaults are assumed."""

    def test_manifest(self) -> None:
        """valueFrom and envFrom are one GC011 each, info only."""
        findings = findings_in("gc011-value-from.yaml")
        assert [(f.code, f.severity) for f in findings] == [("GC011", "info"), ("GC011", "info")]
        assert findings[0].message.startswith("GRACEFUL_SHUTDOWN_DELAY (valueFrom)")
        assert findings[1].message.startswith("envFrom configMapRef graceful-settings")

    def test_secret_ref_and_other_variables(self) -> None:
        """envFrom secretRef is GC011 too; other variables (PORT, from valueFrom) are no concern."""
        values: list[dict[str, Any]] = [
            {"name": "PORT", "value": "8000"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            *env(GRACEFUL_SHUTDOWN_DELAY="5"),
        ]
        doc = pod(container(env=values, envFrom=[{"secretRef": {"name": "creds"}}, {"prefix": "X_"}]))
        messages = [f.message for f in check_documents([doc], "test")]
        assert [m.split(" is resolved")[0] for m in messages] == ["envFrom secretRef creds", "envFrom"]

    def test_variable_reference(self) -> None:
        """A $(VAR) reference is expanded by the kubelet: GC011, and the default is used."""
        values = env(GRACEFUL_SHUTDOWN_DELAY="$(DELAY)")
        assert codes_of(pod(container(env=values))) == ["GC011"]

    def test_value_from_marks_a_graceful_container(self) -> None:
        """A GRACEFUL_* variable from valueFrom still makes the container one to check."""
        values = [{"name": "GRACEFUL_DRAIN_TIMEOUT", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
        assert codes_of(pod(container(command=["app"], env=values, readinessProbe=None))) == [
            "GC001",
            "GC011",
        ]


class TestWhichContainers:
    """Only containers that run graceful are checked."""

    @pytest.mark.parametrize(
        "command",
        [
            ["gunicorn", "-c", "/srv/graceful/conf.py", "app:app"],
            ["gunicorn", "--config=python:graceful.conf", "app:app"],
            ["python", "-m", "graceful", "serve", "app:app"],
        ],
    )
    def test_by_command(self, command: list[str]) -> None:
        """A Gunicorn command with graceful's config, or ``python -m graceful``, is checked."""
        assert codes_of(pod(container(command=command, env=None, readinessProbe=None))) == ["GC001"]

    def test_by_gunicorn_cmd_args(self) -> None:
        """GUNICORN_CMD_ARGS naming graceful's config marks a graceful container."""
        values = env(GUNICORN_CMD_ARGS="-c python:graceful.conf")
        doc = pod(container(command=["gunicorn", "app:app"], env=values, readinessProbe=None))
        assert codes_of(doc) == ["GC001"]

    def test_by_env(self) -> None:
        """Any GRACEFUL_* variable marks a graceful container, whatever its command."""
        doc = pod(container(command=None, env=env(GRACEFUL_DRAIN_TIMEOUT="10"), readinessProbe=None))
        assert codes_of(doc) == ["GC001"]

    def test_others_are_skipped(self) -> None:
        """Plain Gunicorn, sidecars and init containers are not checked."""
        plain = container(command=["gunicorn", "app:app"], env=None, readinessProbe=None)
        sidecar = {"name": "proxy", "image": "envoy", "command": ["sh", "-c", "envoy"]}
        doc = pod(plain, sidecar, initContainers=[container(readinessProbe=None)])
        assert codes_of(doc) == []


class TestDocuments:
    """Reading pod specs out of every kind, List and helm template output."""

    def test_helm_template(self) -> None:
        """helm template output: separators, comments and empty documents; only GC003 in the StatefulSet."""
        (finding,) = findings_in("helm-template.yaml")
        assert (finding.code, finding.kind, finding.name, finding.container) == (
            "GC003",
            "StatefulSet",
            "release-web-worker",
            "worker",
        )

    def test_list(self) -> None:
        """kind: List items are checked, each under its own kind and name."""
        (finding,) = findings_in("list.yaml")
        assert (finding.code, finding.kind, finding.name, finding.container) == (
            "GC001",
            "Pod",
            "web-7d4b9",
            "web",
        )

    @pytest.mark.parametrize(
        ("kind", "path"),
        [
            ("Deployment", ("spec", "template", "spec")),
            ("StatefulSet", ("spec", "template", "spec")),
            ("DaemonSet", ("spec", "template", "spec")),
            ("Job", ("spec", "template", "spec")),
            ("CronJob", ("spec", "jobTemplate", "spec", "template", "spec")),
            ("PodTemplate", ("template", "spec")),
        ],
    )
    def test_pod_templates(self, kind: str, path: tuple[str, ...]) -> None:
        """The pod template of each workload kind is found."""
        spec: dict[str, Any] = {"containers": [container(readinessProbe=None)]}
        for key in reversed(path):
            spec = {key: spec}
        doc = {"kind": kind, "metadata": {"name": "w"}, **spec}
        (finding,) = check_documents([doc], "test")
        assert (finding.code, finding.kind) == ("GC001", kind)

    def test_odd_documents_are_skipped(self) -> None:
        """None, scalars, lists, kinds without pods and malformed specs are skipped quietly."""
        docs: list[Any] = [
            None,
            "text",
            [1, 2],
            {"kind": "Service", "spec": {}},
            {"metadata": {}},
            {"kind": "Deployment", "spec": "oops"},
            {"kind": "Pod", "spec": {"containers": "oops"}},
            {"kind": "Pod", "spec": {"containers": ["oops", None]}},
        ]
        assert check_documents(docs, "test") == []

    def test_finding_fields(self) -> None:
        """A finding names its source, object and container; its line form has them all."""
        doc = pod(container(readinessProbe=None))
        del doc["metadata"]
        (finding,) = check_documents([doc], "deploy.yaml")
        assert (finding.source, finding.kind, finding.name, finding.container) == (
            "deploy.yaml",
            "Pod",
            "<unnamed>",
            "app",
        )
        assert finding.line().startswith("deploy.yaml: error GC001 Pod/<unnamed>[app]: no readinessProbe")
        assert "; fix: add readinessProbe" in finding.line()

    def test_findings_are_frozen(self) -> None:
        """A Finding cannot be changed."""
        (finding,) = check_documents([pod(container(readinessProbe=None))], "test")
        with pytest.raises(AttributeError):
            finding.code = "GC999"  # type: ignore[misc]


class TestMain:
    """The command line: output, formats and exit statuses."""

    def test_error_exits_one(self, capsys: pytest.CaptureFixture[str]) -> None:
        """An error finding prints one line and exits 1."""
        path = str(MANIFESTS / "gc001-no-readiness-probe.yaml")
        status, out, err = run(capsys, path)
        assert status == 1
        (line,) = out.splitlines()
        assert line.startswith(f"{path}: error GC001 Deployment/gc001-no-readiness-probe[app]: ")
        assert "1 error(s)" in err

    def test_warning_exits_zero(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Warnings and info alone exit 0."""
        status, out, _ = run(capsys, str(MANIFESTS / "gc006-prestop-sleep.yaml"))
        assert status == 0
        assert " warning GC006 " in out

    def test_missing_file_exits_two(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A missing file is a one-line message and exit 2, never a traceback."""
        status, out, err = run(capsys, str(MANIFESTS / "missing.yaml"))
        assert (status, out) == (2, "")
        assert err == f"graceful check: cannot read {MANIFESTS / 'missing.yaml'}: No such file or directory\n"

    def test_invalid_yaml_exits_two(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Invalid YAML is a one-line message with the line and column, and exit 2."""
        status, out, err = run(capsys, str(MANIFESTS / "invalid.yaml"))
        assert (status, out) == (2, "")
        assert err.startswith(f"graceful check: {MANIFESTS / 'invalid.yaml'} is not valid YAML: ")
        assert "(line 6, column 2)" in err
        assert len(err.splitlines()) == 1

    def test_directory_exits_two(self, capsys: pytest.CaptureFixture[str]) -> None:
        """A directory is not a manifest: exit 2."""
        status, _, err = run(capsys, str(MANIFESTS))
        assert status == 2
        assert "cannot read" in err

    def test_not_utf8_exits_two(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """A file that is not UTF-8 text exits 2."""
        path = tmp_path / "binary.yaml"
        path.write_bytes(b"kind: \xff\xfe\n")
        status, _, err = run(capsys, str(path))
        assert status == 2
        assert err.startswith(f"graceful check: cannot read {path}: ")

    def test_unreadable_beats_errors(self, capsys: pytest.CaptureFixture[str]) -> None:
        """One unreadable input exits 2; the readable ones are still checked."""
        status, out, _ = run(capsys, str(MANIFESTS / "gc001-no-readiness-probe.yaml"), "missing.yaml")
        assert status == 2
        assert " error GC001 " in out

    def test_stdin_dash(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        """- reads standard input; findings name it <stdin>."""
        text = (MANIFESTS / "gc007-shell-form.yaml").read_text(encoding="utf-8")
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        status, out, _ = run(capsys, "-")
        assert status == 1
        assert out.startswith("<stdin>: error GC007 Deployment/gc007-shell-form[app]: ")

    def test_stdin_invalid_yaml(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        """Invalid YAML on standard input exits 2."""
        monkeypatch.setattr("sys.stdin", io.StringIO("a: [\n"))
        status, _, err = run(capsys, "-")
        assert status == 2
        assert err.startswith("graceful check: <stdin> is not valid YAML: ")

    def test_stdin_control_characters(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Characters YAML does not accept exit 2 with a one-line reason."""
        monkeypatch.setattr("sys.stdin", io.StringIO("kind: Pod\x00\n"))
        status, _, err = run(capsys, "-")
        assert status == 2
        assert len(err.splitlines()) == 1
        assert "unacceptable character" in err

    def test_no_file_reads_stdin(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        """Without FILE, a piped standard input is read."""
        monkeypatch.setattr("sys.stdin", io.StringIO((MANIFESTS / "clean.yaml").read_text(encoding="utf-8")))
        assert run(capsys)[0] == 0

    def test_no_file_on_a_terminal(self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
        """Without FILE and with a terminal on standard input, exit 2 instead of waiting."""
        monkeypatch.setattr("sys.stdin", _Terminal())
        status, _, err = run(capsys)
        assert status == 2
        assert "standard input is a terminal" in err

    def test_nothing_to_check(self, capsys: pytest.CaptureFixture[str]) -> None:
        """Files without a graceful container exit 0 and say so."""
        status, out, err = run(capsys, str(EXAMPLES / "service.yaml"))
        assert (status, out) == (0, "")
        assert "no container runs graceful" in err

    def test_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--format json prints one document with every finding's fields."""
        status, out, _ = run(
            capsys, "--format", "json", str(MANIFESTS / "gc005-budget-over-grace-period.yaml"), "missing.yaml"
        )
        report = json.loads(out)
        assert status == 2
        assert report["containers_checked"] == 1
        assert [f["code"] for f in report["findings"]] == ["GC005", "GC010"]
        assert set(report["findings"][0]) == {
            "severity",
            "source",
            "kind",
            "name",
            "container",
            "code",
            "message",
            "fix",
        }
        assert report["unreadable"] == ["cannot read missing.yaml: No such file or directory"]

    def test_json_clean(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--format json on clean input is an empty findings list and exit 0."""
        status, out, _ = run(capsys, "--format", "json", str(MANIFESTS / "clean.yaml"))
        assert status == 0
        assert json.loads(out) == {"containers_checked": 1, "findings": [], "unreadable": []}

    def test_propagation_option(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--propagation raises the allowance: the clean manifest's 5s delay is then too short."""
        status, out, _ = run(capsys, "--propagation", "4", str(MANIFESTS / "clean.yaml"))
        assert status == 1
        assert " error GC004 " in out

    @pytest.mark.parametrize("value", ["-1", "soon", "nan", "inf"])
    def test_bad_propagation(self, capsys: pytest.CaptureFixture[str], value: str) -> None:
        """A --propagation that is not a finite number of seconds >= 0 is a usage error: exit 2."""
        status, _, err = run(capsys, f"--propagation={value}", str(MANIFESTS / "clean.yaml"))
        assert status == 2
        assert "usage: graceful check" in err

    def test_unknown_option(self, capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown option is a usage error: exit 2."""
        assert run(capsys, "--colour")[0] == 2

    def test_help(self, capsys: pytest.CaptureFixture[str]) -> None:
        """--help prints the usage and exits 0."""
        status, out, _ = run(capsys, "--help")
        assert status == 0
        assert out.startswith("usage: graceful check")


class TestSubprocess:
    """The exit statuses as a shell sees them."""

    @staticmethod
    def _run(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        """Run main in a fresh interpreter, as the console script will."""
        code = "import sys; from graceful.check import main; sys.exit(main(sys.argv[1:]))"
        environ = {**os.environ, "PYTHONPATH": str(ROOT)}
        return subprocess.run(
            [sys.executable, "-c", code, *argv],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=environ,
            timeout=60,
            check=False,
        )

    def test_exit_statuses(self) -> None:
        """0 for the examples, 1 for an error finding, 2 for a missing file, without a traceback."""
        examples = [str(path) for path in sorted(EXAMPLES.glob("*.yaml"))]
        assert self._run(*examples).returncode == 0
        assert self._run(str(MANIFESTS / "gc004-delay-too-short.yaml")).returncode == 1
        missing = self._run("missing.yaml")
        assert missing.returncode == 2
        assert "Traceback" not in missing.stderr

    def test_stdin(self) -> None:
        """- reads a pipe: invalid YAML exits 2, helm template output with an error exits 1."""
        assert self._run("-", stdin="a: [\n").returncode == 2
        helm = (MANIFESTS / "helm-template.yaml").read_text(encoding="utf-8")
        assert self._run("-", stdin=helm).returncode == 1


def _resources(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the Kubernetes objects of a file, List items included."""
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            yield from doc["items"]
        elif isinstance(doc, dict):
            yield doc


class TestKubernetesSchemas:
    """Every manifest is valid Kubernetes, so the findings are about real objects."""

    @pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda path: path.name)
    def test_examples_validate(self, path: Path) -> None:
        """The examples pass kubernetes-validate's strict schemas (no unknown fields)."""
        resources = list(_resources(path))
        assert resources
        for resource in resources:
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)

    @pytest.mark.parametrize(
        "path",
        sorted(path for path in MANIFESTS.glob("*.yaml") if path.name != "invalid.yaml"),
        ids=lambda path: path.name,
    )
    def test_test_manifests_validate(self, path: Path) -> None:
        """The test manifests pass kubernetes-validate's strict schemas too."""
        for resource in _resources(path):
            kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)

    def test_schemas_catch_mistakes(self) -> None:
        """The validation is real: a misspelt probe field fails it."""
        (deployment,) = _resources(EXAMPLES / "deployment.yaml")
        deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["periodSecond"] = 1
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)

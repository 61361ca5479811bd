"""Tests for graceful.kubernetes.command: output, formats and exit statuses."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kubernetes import hostile
from tests.kubernetes.helpers import EXAMPLES, MANIFESTS, ROOT, Terminal, run


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
        monkeypatch.setattr("sys.stdin", Terminal())
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
        status, out, _ = run(capsys, "--propagation", "6", str(MANIFESTS / "clean.yaml"))
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
        code = "import sys; from graceful.kubernetes.command import main; sys.exit(main(sys.argv[1:]))"
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


#: Run ``graceful check`` as ``python -m graceful check`` does, under an address-space limit, and print the
#: process's peak resident memory (kB) on standard output after the findings. The peak is the kernel's
#: VmHWM of this process's own memory: ru_maxrss would also count the forked copy of the test runner
#: that existed before exec (seen: 268 MB on Python 3.10 for a check that peaks at 18 MB).
_BOUNDED = """
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from graceful.cli import main
status = main(["check", *sys.argv[2:]])
with open("/proc/self/status") as status_file:
    peak = next(line.split()[1] for line in status_file if line.startswith("VmHWM:"))
print("maxrss_kb", peak)
sys.exit(status)
"""


def _bounded(*argv: str, timeout: float = 30, memory: int = 2**30) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run the check in a fresh interpreter limited to ``memory`` bytes; return it and its peak RSS in MB."""
    done = subprocess.run(
        [sys.executable, "-c", _BOUNDED, str(memory), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=timeout,
        check=False,
    )
    rss = [line for line in done.stdout.splitlines() if line.startswith("maxrss_kb ")]
    return done, int(rss[-1].split()[1]) // 1024 if rss else -1


class TestHostileInputs:
    """Every malformed or hostile input exits 2 with one line naming the file and the problem, never a traceback."""

    @pytest.mark.parametrize(
        ("text", "problem"),
        [
            (hostile.deep_nesting(10_000), "nesting"),
            (hostile.deep_block_nesting(10_000), "nesting deeper than 512 levels (line 1)"),
            (hostile.pre_stop_sleep(".inf"), "lifecycle.preStop.sleep.seconds is .inf, outside what Kubernetes"),
            (hostile.pre_stop_sleep(".nan"), "lifecycle.preStop.sleep.seconds is .nan, outside what Kubernetes"),
            (hostile.pre_stop_sleep("-40"), "lifecycle.preStop.sleep.seconds is -40, outside what Kubernetes"),
            (hostile.pre_stop_sleep(str(2**63)), "is 9223372036854775808, outside what Kubernetes accepts"),
            (hostile.pre_stop_exec_sleep("9" * 400), "lifecycle.preStop.exec.command is 'sleep 9999"),
            ("a: " + "9" * 5000 + "\n", "cannot be read (line 1)"),
            ("a: &a [1, *a]\n", "a recursive structure"),
            ("kind: Pod\x00\n", "unacceptable character"),
        ],
        ids=[
            "flow-10000",
            "block-10000",
            "inf",
            "nan",
            "negative",
            "int64",
            "exec-nines",
            "digits",
            "recursive",
            "nul",
        ],
    )
    def test_one_line_and_exit_two(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, problem: str
    ) -> None:
        """The hostile input exits 2; standard error is one line: graceful check, the file, the problem."""
        path = tmp_path / "hostile.yaml"
        path.write_text(text, encoding="utf-8")
        status, out, err = run(capsys, str(path))
        assert (status, out) == (2, "")
        (line,) = err.splitlines()
        assert line.startswith(f"graceful check: {path}")
        assert problem in line

    def test_other_inputs_are_still_checked(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """A hostile input among good ones: its line, the others' findings, exit 2."""
        path = tmp_path / "inf.yaml"
        path.write_text(hostile.pre_stop_sleep(".inf"), encoding="utf-8")
        status, out, err = run(capsys, str(MANIFESTS / "gc007-shell-form.yaml"), str(path))
        assert status == 2
        assert " error GC007 " in out
        assert f"graceful check: {path}: Pod/web: spec.containers[app].lifecycle.preStop.sleep.seconds" in err

    def test_alias_bomb_in_a_container(self, tmp_path: Path) -> None:
        """A billion laughs in a container's args: exit 2 in one line, within 1 GB of address space and 30 s."""
        path = tmp_path / "bomb.yaml"
        path.write_text(hostile.alias_bomb_in_container(), encoding="utf-8")
        done, rss = _bounded(str(path))
        assert done.returncode == 2
        (line,) = done.stderr.splitlines()
        assert line.startswith(f"graceful check: {path}: its aliases expand to more than 1,000,000 nodes")
        assert 0 < rss < 200  # MB: the bomb is never expanded (PyYAML itself parses it in about 18 MB)

    @pytest.mark.big
    @pytest.mark.timeout(600)
    def test_twenty_megabytes(self, tmp_path: Path) -> None:
        """69,242 documents (20 MB) are checked within 1 GB of address space and under 300 MB resident.

        Time is measured in bench/check_inputs.py; here only a generous bound, for a loaded machine.
        """
        path = tmp_path / "big.yaml"
        size = hostile.write_big_manifest(path)
        assert 19_000_000 < size < 21_000_000
        done, rss = _bounded(str(path), timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stderr == "graceful check: 69242 container(s) checked: 0 error(s), 0 warning(s), 0 info\n"
        assert 0 < rss < 300

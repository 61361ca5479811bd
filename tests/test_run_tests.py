"""The README's test command (scripts/run-tests, scripts/tox_matrix.py): what it runs on which machine."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import ROOT

RUN_TESTS = ROOT / "scripts" / "run-tests"
TOX_MATRIX = ROOT / "scripts" / "tox_matrix.py"
#: A fresh Debian's PATH, with nothing but the system's own python3.
SYSTEM_PATH = "/usr/bin:/bin"
_PLAN_LINE = re.compile(r"^run-tests: (run|skip|MISSING) +(\S+) +python(3\.\d+) ")


def _load() -> ModuleType:
    """scripts/tox_matrix.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("tox_matrix", TOX_MATRIX)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tox_matrix"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


tox_matrix = _load()

#: The one interpreter a FakeMachine has: the first one the matrix needs, whichever Python runs the tests.
FAKE_MINOR = next(m for m in map(tox_matrix.ToxIni().interpreter, tox_matrix.ToxIni().env_list) if m)


def plan_lines(output: str) -> dict[str, tuple[str, str]]:
    """``env -> (status, 3.X)`` from a plan's lines."""
    rows = {}
    for line in output.splitlines():
        match = _PLAN_LINE.match(line)
        if match:
            rows[match.group(2)] = (match.group(1), match.group(3))
    return rows


def runs_as(executable: str, minor: str) -> bool:
    """Whether ``executable`` exists and is Python ``minor``."""
    if not os.access(executable, os.X_OK):
        return False
    probe = subprocess.run(
        [executable, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return probe.returncode == 0 and probe.stdout.strip() == minor


def tox_base_pythons(envs: list[str]) -> dict[str, str]:
    """What tox itself says each environment's base_python is."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOX_")}
    done = subprocess.run(
        [sys.executable, "-m", "tox", "config", "-c", str(ROOT / "tox.ini"), "-e", ",".join(envs), "-k", "base_python"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    )
    found, section = {}, ""
    for line in done.stdout.splitlines():
        header = re.fullmatch(r"\[testenv:(.+)\]", line.strip())
        if header:
            section = header.group(1)
        elif line.startswith("base_python = ") and section:
            found[section] = line[len("base_python = ") :].strip()
    return found


@pytest.mark.scripts
class TestToxIni:
    def test_expand_generative_names(self) -> None:
        """Braces expand to each choice, ranges to each number, several braces to every combination."""
        assert tox_matrix.expand("gunicorn{22,23}") == ["gunicorn22", "gunicorn23"]
        assert tox_matrix.expand("py3{10-12}") == ["py310", "py311", "py312"]
        assert tox_matrix.expand("py{310,311}-django{42,52}") == [
            "py310-django42",
            "py310-django52",
            "py311-django42",
            "py311-django52",
        ]

    def test_env_list_is_toxs(self) -> None:
        """The default environments are the ones `tox -l` lists."""
        env = {key: value for key, value in os.environ.items() if not key.startswith("TOX_")}
        listed = subprocess.run(
            [sys.executable, "-m", "tox", "-l", "-c", str(ROOT / "tox.ini")],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=True,
        ).stdout.split()
        assert tox_matrix.ToxIni().env_list == listed

    def test_interpreters_are_the_ones_tox_uses(self) -> None:
        """Each environment's interpreter, read from tox.ini, is the base_python tox itself resolves."""
        ini = tox_matrix.ToxIni()
        envs = ini.all_envs()
        from_tox = tox_base_pythons(envs)
        assert set(from_tox) == set(envs)
        for env in envs:
            match = re.fullmatch(r"(?:python|py)3\.?(\d+)", from_tox[env])
            assert match is not None, (env, from_tox[env])
            assert ini.interpreter(env) == f"3.{match.group(1)}", env

    def test_unknown_base_python_is_an_error(self, tmp_path: Path) -> None:
        """A base_python the reader cannot map to 3.X is an error naming the environment, not a guess."""
        ini_file = tmp_path / "tox.ini"
        ini_file.write_text("[tox]\nenv_list = odd\n[testenv:odd]\nbase_python = pypy3\n")
        with pytest.raises(ValueError, match="odd"):
            tox_matrix.ToxIni(ini_file).interpreter("odd")


class TestSplitArgs:
    def test_env_forms(self) -> None:
        """-e X, -eX, --env X and --env=X all name environments; commas list several."""
        assert tox_matrix.split_args(["-e", "py311,lint"]) == (["py311", "lint"], [])
        assert tox_matrix.split_args(["-epy311", "--env", "type", "--env=py310"]) == (["py311", "type", "py310"], [])

    def test_everything_else_goes_to_tox(self) -> None:
        """Other options, and everything after --, are passed on (an -e after -- is pytest's)."""
        envs, rest = tox_matrix.split_args(["-r", "-e", "py311", "--", "-k", "x", "-e", "y"])
        assert envs == ["py311"]
        assert rest == ["-r", "--", "-k", "x", "-e", "y"]


@pytest.mark.scripts
class TestPlanWithTheSystemPython:
    """``scripts/run-tests --plan`` as on a fresh Debian: PATH has /usr/bin and /bin only, no pyenv."""

    def plan(self, home: Path, ci: bool) -> subprocess.CompletedProcess[str]:
        """``scripts/run-tests --plan`` with only the system's PATH and a HOME of its own."""
        bash = shutil.which("bash", path=SYSTEM_PATH)
        assert bash is not None
        env = {"PATH": SYSTEM_PATH, "HOME": str(home)}
        if ci:
            env["CI"] = "true"
        return subprocess.run(
            [bash, str(RUN_TESTS), "--plan"], capture_output=True, text=True, timeout=120, env=env, cwd=home
        )

    @staticmethod
    def system_minors(minors: set[str]) -> set[str]:
        """Which of ``minors`` the system's own folders have."""
        return {m for m in minors if any(runs_as(f"{d}/python{m}", m) for d in SYSTEM_PATH.split(":"))}

    def test_proceeds_with_the_environments_it_can_run(self, tmp_path: Path) -> None:
        """It runs the system python3's environments, names the others with how to get them, and exits 0."""
        if not os.access("/usr/bin/python3", os.X_OK):
            pytest.skip("no /usr/bin/python3")
        done = self.plan(tmp_path, ci=False)
        assert done.returncode == 0, done.stdout + done.stderr
        rows = plan_lines(done.stdout)
        assert list(rows) == tox_matrix.ToxIni().env_list
        available = self.system_minors({minor for _status, minor in rows.values()})
        system = self._system_minor()
        assert system in available
        for env, (status, minor) in rows.items():
            assert status == ("run" if minor in available else "skip"), env
        assert any(status == "run" and minor == system for status, minor in rows.values())
        for env, (status, minor) in rows.items():
            if status == "skip":
                assert re.search(rf"skip +{env} .*pyenv install {minor} or uv python install {minor}", done.stdout)
        would_run = [env for env, (status, _m) in rows.items() if status == "run"]
        assert f"run-tests: would run: {' '.join(would_run)}" in done.stdout

    def test_under_ci_a_missing_interpreter_fails(self, tmp_path: Path) -> None:
        """With CI=true every environment is required: the missing ones are named and the exit status is 1."""
        if not os.access("/usr/bin/python3", os.X_OK):
            pytest.skip("no /usr/bin/python3")
        ini = tox_matrix.ToxIni()
        needs = {env: ini.interpreter(env) for env in ini.env_list}
        available = self.system_minors({minor for minor in needs.values() if minor})
        missing = [env for env, minor in needs.items() if minor and minor not in available]
        if not missing:
            pytest.skip("this machine's /usr/bin has every interpreter of the matrix")
        done = self.plan(tmp_path, ci=True)
        assert done.returncode == 1
        assert [env for env, (status, _m) in plan_lines(done.stdout).items() if status == "MISSING"] == missing
        assert f"missing interpreter(s) for: {' '.join(missing)}" in done.stderr

    @staticmethod
    def _system_minor() -> str:
        """The X.Y of /usr/bin/python3."""
        probe = subprocess.run(
            ["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return probe.stdout.strip()


class FakeMachine:
    """A PATH (nothing else on it) with one ``python3.X`` (:data:`FAKE_MINOR`), a pyenv, and a tox.

    Each ``python3.X`` here is a stand-in that answers the version probe, as a real one would (tox
    is a stand-in too: nothing else runs it). The pyenv and tox stand-ins record their arguments;
    a pyenv install that works leaves such a ``python3.X``.
    """

    def __init__(self, folder: Path, *, install_works: bool = False, tox_status: int = 0) -> None:
        self.bin = folder / "bin"
        self.bin.mkdir()
        self.pyenv_root = folder / "pyenv"
        (self.pyenv_root / "versions").mkdir(parents=True)
        self.pyenv_log = folder / "pyenv.log"
        self.tox_log = folder / "tox.log"
        self._script(f"python{FAKE_MINOR}", f"echo {FAKE_MINOR}.0\n")
        if install_works:
            install = (
                'dir="$root/versions/$3.0/bin"; /bin/mkdir -p "$dir"; '
                'printf "#!/bin/sh\\necho $3.0\\n" > "$dir/python$3"; /bin/chmod +x "$dir/python$3"'
            )
        else:
            install = 'echo "curl: (6) Could not resolve host: www.python.org" >&2; exit 1'
        self._script(
            "pyenv",
            f'root="{self.pyenv_root}"\necho "$*" >> "{self.pyenv_log}"\n'
            f'case "$1" in\n  root) echo "$root" ;;\n  versions) /bin/ls "$root/versions" ;;\n'
            f"  install) {install} ;;\nesac\n",
        )
        self._script(
            "tox",
            f'echo "$*" > "{self.tox_log}"\necho "$PATH" >> "{self.tox_log}"\n'
            f'echo "UV_PYTHON_DOWNLOADS=$UV_PYTHON_DOWNLOADS UV_SYSTEM_CERTS=$UV_SYSTEM_CERTS'
            f' UV_NATIVE_TLS=$UV_NATIVE_TLS" >> "{self.tox_log}"\nexit {tox_status}\n',
        )

    def _script(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)

    def run(self, *args: str, ci: bool = False) -> subprocess.CompletedProcess[str]:
        """``tox_matrix.py --tox FAKE ARGS`` with this PATH only."""
        env = {"PATH": str(self.bin), "HOME": str(self.bin.parent)}
        if ci:
            env["CI"] = "true"
        argv = [sys.executable, str(TOX_MATRIX), "--tox", str(self.bin / "tox"), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)

    def pyenv_installs(self) -> list[str]:
        """The versions pyenv was asked to install."""
        lines = self.pyenv_log.read_text().splitlines() if self.pyenv_log.exists() else []
        return [line.split()[-1] for line in lines if line.startswith("install ")]

    def tox_path(self) -> list[str]:
        """The PATH tox was run with."""
        return self.tox_log.read_text().splitlines()[1].split(os.pathsep)

    def tox_uv_settings(self) -> str:
        """What tox-uv was told: interpreter downloads and certificates."""
        return self.tox_log.read_text().splitlines()[2]

    def tox_envs(self) -> list[str] | None:
        """The environments tox was asked to run (None: tox was not run)."""
        if not self.tox_log.exists():
            return None
        words = self.tox_log.read_text().splitlines()[0].split()
        assert words[:2] == ["run", "-e"], words
        return words[2].split(",")


def default_needs() -> dict[str, str]:
    """Each default environment and the 3.X it needs."""
    ini = tox_matrix.ToxIni()
    return {env: ini.interpreter(env) for env in ini.env_list}


@pytest.mark.scripts
class TestRunWithMissingInterpreters:
    def test_tries_pyenv_then_runs_what_it_can_and_exits_with_toxs_status(self, tmp_path: Path) -> None:
        """Each missing interpreter is tried once with pyenv; tox runs the rest; not-run ones are named; exit 0."""
        machine = FakeMachine(tmp_path)
        done = machine.run()
        assert done.returncode == 0, done.stdout + done.stderr
        needs = default_needs()
        missing = sorted({minor for minor in needs.values() if minor != FAKE_MINOR})
        assert machine.pyenv_installs() == missing
        assert machine.tox_envs() == [env for env, minor in needs.items() if minor == FAKE_MINOR]
        for minor in missing:
            assert f"could not get python{minor}: `pyenv install --skip-existing {minor}` failed: exit 1: curl" in (
                done.stdout
            )
        for env, minor in needs.items():
            if minor != FAKE_MINOR:
                assert f"run-tests: not run: {env} (no python{minor}; get it: pyenv install {minor}" in done.stdout

    def test_uv_fetches_no_interpreter_and_trusts_the_system_certificates(self, tmp_path: Path) -> None:
        """tox runs with UV_PYTHON_DOWNLOADS=never (an environment has the interpreter the plan found) and the
        machine's certificate store (a clean environment behind a TLS-inspecting proxy failed every install)."""
        machine = FakeMachine(tmp_path)
        assert machine.run().returncode == 0
        assert machine.tox_uv_settings() == "UV_PYTHON_DOWNLOADS=never UV_SYSTEM_CERTS=true UV_NATIVE_TLS=true"

    def test_a_failing_tox_fails_the_run(self, tmp_path: Path) -> None:
        """The exit status is tox's when the environments that ran failed."""
        machine = FakeMachine(tmp_path, tox_status=3)
        assert machine.run().returncode == 3

    def test_an_interpreter_pyenv_installs_is_run(self, tmp_path: Path) -> None:
        """When pyenv's install works, the new interpreter's environments run too (its folder first on tox's PATH)."""
        machine = FakeMachine(tmp_path, install_works=True)
        done = machine.run()
        assert done.returncode == 0, done.stdout + done.stderr
        assert machine.tox_envs() == list(default_needs())
        assert "not run:" not in done.stdout
        fetched = [str(machine.pyenv_root / "versions" / f"{minor}.0" / "bin") for minor in machine.pyenv_installs()]
        *found_first, original = machine.tox_path()
        assert original == str(machine.bin) and set(fetched) <= set(found_first)

    def test_under_ci_tox_does_not_run(self, tmp_path: Path) -> None:
        """With CI=true a missing interpreter (after trying pyenv) fails at once, before tox."""
        machine = FakeMachine(tmp_path)
        done = machine.run(ci=True)
        assert done.returncode == 1
        assert machine.tox_envs() is None
        assert "missing interpreter(s) for:" in done.stderr

    def test_a_named_environment_is_required(self, tmp_path: Path) -> None:
        """-e with an environment whose interpreter is missing fails; -e with runnable ones runs just those."""
        machine = FakeMachine(tmp_path)
        other = next(env for env, minor in default_needs().items() if minor != FAKE_MINOR)
        assert machine.run("-e", other).returncode == 1
        assert machine.tox_envs() is None
        mine = [env for env, minor in default_needs().items() if minor == FAKE_MINOR]
        done = machine.run("-e", ",".join(mine), "--", "-k", "lifecycle")
        assert done.returncode == 0
        assert machine.tox_log.read_text().splitlines()[0].split() == [
            "run",
            "-e",
            ",".join(mine),
            "--",
            "-k",
            "lifecycle",
        ]

    def test_an_interpreter_get_python_made_is_found(self, tmp_path: Path) -> None:
        """A python3.X that scripts/get-python put in the user's cache folder is found and put first on tox's PATH."""
        machine = FakeMachine(tmp_path)
        minor = tox_matrix.DEBIAN_PYTHONS[0]
        folder = tmp_path / ".cache" / "graceful-python" / minor / "bin"  # HOME is tmp_path
        folder.mkdir(parents=True)
        (folder / f"python{minor}").write_text(f"#!/bin/sh\necho {minor}.0\n")
        (folder / f"python{minor}").chmod(0o755)
        done = machine.run()
        assert done.returncode == 0, done.stdout + done.stderr
        needs = default_needs()
        assert minor in needs.values(), "the matrix has no environment on a Python scripts/get-python gets"
        assert machine.tox_envs() == [env for env, m in needs.items() if m in (FAKE_MINOR, minor)]
        assert str(folder) in machine.tox_path()

    def test_a_missing_debian_python_is_named_with_get_python(self, tmp_path: Path) -> None:
        """An environment on a Python Debian 12 lacks is named with scripts/get-python as a way to get it."""
        machine = FakeMachine(tmp_path)
        done = machine.run()
        envs = [env for env, minor in default_needs().items() if minor in tox_matrix.DEBIAN_PYTHONS]
        assert envs
        for env in envs:
            minor = default_needs()[env]
            named = rf"not run: {env} \(no python{minor}; get it: .* or scripts/get-python {minor}\)"
            assert re.search(named, done.stdout), done.stdout

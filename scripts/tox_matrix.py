"""The tox matrix on this machine: which environments need which interpreter, which can run, running them.

Called by ``scripts/run-tests`` (the README's test command) with the system's ``python3``: standard
library only, so it also runs on an interpreter without ``venv``. tox.ini is the one source of truth:
an environment's interpreter comes from its Python factor (``py311``) or its ``base_python``, as in tox.

Outside CI, an environment whose interpreter cannot be found or fetched is skipped and named, with
how to get it; the exit status is tox's for those that ran. Under ``CI=true``, and for environments
named with ``-e``, a missing interpreter is a failure.

    python3 scripts/tox_matrix.py --plan [-e ENVS]          what would run and what not; runs nothing
    python3 scripts/tox_matrix.py --tox TOX [TOX ARGS...]   get interpreters, run ``TOX run``
"""

from __future__ import annotations

import configparser
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOX_INI = ROOT / "tox.ini"
PREFIX = "run-tests:"

#: How each tool gets an interpreter (the ``3.X`` is appended), quickest first.
FETCH_COMMAND = {"uv": ["python", "install"], "pyenv": ["install", "--skip-existing"]}
#: Bounds (s) on getting one interpreter: uv downloads a build; pyenv downloads and compiles one.
FETCH_TIMEOUT = {"uv": 300, "pyenv": 1200}
#: Bound (s) on asking an interpreter its version (a broken pyenv shim may hang on a prompt).
PROBE_TIMEOUT = 20
#: The Pythons Debian 12 lacks that ``scripts/get-python X.Y`` gets from Debian unstable, and where:
#: ``PYTHON_HOME/X.Y`` (a folder of the user's own, so it outlives CI's clean clones).
DEBIAN_PYTHONS = ("3.14", "3.15")
PYTHON_HOME = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "graceful-python"

_PY_FACTOR = re.compile(r"^py(3)\.?(\d+)$")
_PYTHON_NAME = re.compile(r"^(?:python|py)(3)\.?(\d+)$")


# -- which interpreter each environment needs (read from tox.ini) --------------------------------------


def expand(pattern: str) -> list[str]:
    """Expand tox's generative names: ``gunicorn{22,23}`` -> gunicorn22, gunicorn23; ``py3{10-12}`` too."""
    parts = re.split(r"(\{[^{}]*\})", pattern.strip())
    choices: list[list[str]] = []
    for part in parts:
        if part.startswith("{") and part.endswith("}"):
            options: list[str] = []
            for item in part[1:-1].split(","):
                item = item.strip()
                span = re.fullmatch(r"(\d+)-(\d+)", item)
                if span:
                    low, high = int(span.group(1)), int(span.group(2))
                    options += [str(n) for n in range(low, high + 1)]
                else:
                    options.append(item)
            choices.append(options)
        else:
            choices.append([part])
    return ["".join(combo) for combo in itertools.product(*choices)]


def _names(value: str) -> list[str]:
    """A tox list value (commas and/or new lines), each entry expanded."""
    names: list[str] = []
    for line in value.splitlines():
        # Commas inside braces belong to the generative name, not to the list.
        for entry in re.split(r",(?![^{]*\})", line.split("#", 1)[0]):
            if entry.strip():
                names += expand(entry)
    return names


class ToxIni:
    """The parts of tox.ini that say which environments exist and which interpreter each needs."""

    def __init__(self, path: Path = TOX_INI) -> None:
        self._parser = configparser.ConfigParser(interpolation=None)
        self._parser.read(path)
        tox = self._parser["tox"] if self._parser.has_section("tox") else {}
        self.env_list = _names(tox.get("env_list", tox.get("envlist", "")))

    def all_envs(self) -> list[str]:
        """The default env_list, then every other environment a ``[testenv:...]`` section names."""
        names = list(self.env_list)
        for section in self._parser.sections():
            if section.startswith("testenv:"):
                names += [name for name in expand(section[len("testenv:") :]) if name not in names]
        return names

    def _base_python(self, env: str) -> str | None:
        for section in self._parser.sections():
            if (
                section.startswith("testenv:")
                and env in expand(section[len("testenv:") :])
                and self._parser.has_option(section, "base_python")
            ):
                return self._parser.get(section, "base_python")
        if self._parser.has_section("testenv") and self._parser.has_option("testenv", "base_python"):
            return self._parser.get("testenv", "base_python")
        return None

    def interpreter(self, env: str) -> str | None:
        """The ``3.X`` that ``env`` runs on, or None for tox's own interpreter.

        A Python factor in the name wins over ``base_python`` (tox refuses a conflict between them).
        Raises ValueError for a ``base_python`` this reader does not understand.
        """
        for factor in env.split("-"):
            match = _PY_FACTOR.match(factor)
            if match:
                return f"{match.group(1)}.{match.group(2)}"
        base = self._base_python(env)
        if base is None:
            return None
        first = _names(base)[0] if _names(base) else ""
        match = _PYTHON_NAME.match(first)
        if not match:
            raise ValueError(f"tox.ini: cannot tell which interpreter {env} needs from base_python = {base.strip()}")
        return f"{match.group(1)}.{match.group(2)}"


# -- finding and getting interpreters ------------------------------------------------------------------


def debian_python(minor: str, prefix: Path | None = None) -> Path:
    """Where ``scripts/get-python`` puts ``python{minor}``: ``bin`` in ``prefix`` (default ``PYTHON_HOME/X.Y``)."""
    return (prefix or PYTHON_HOME / minor) / "bin" / f"python{minor}"


def _version_of(executable: str) -> str | None:
    """``X.Y.Z`` of an interpreter, or None if it does not run (e.g. a pyenv shim for an inactive version)."""
    try:
        done = subprocess.run(
            [executable, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@dataclass
class Interpreter:
    """An interpreter that answered: its path and full version."""

    path: str
    version: str


@dataclass
class Machine:
    """What this machine offers: the PATH, pyenv and uv if installed, and the interpreters found on them."""

    path: str
    found: dict[str, Interpreter] = field(default_factory=dict)
    _pyenv_versions: list[str] | None = field(default=None, init=False, repr=False)

    def which(self, name: str) -> str | None:
        """``name`` on this machine's PATH, or None."""
        return shutil.which(name, path=self.path)

    def _pyenv_bins(self, minor: str) -> list[str]:
        """pyenv's newest ``minor`` (e.g. 3.12.1 for 3.12): its bin folder, or nothing."""
        if self._pyenv_versions is None:
            self._pyenv_versions = self._list_pyenv_versions()
        pattern = re.compile(rf"^{re.escape(minor)}\.(\d+)$")
        for folder in self._pyenv_versions:
            if pattern.match(Path(folder).parent.name):
                return [folder]
        return []

    def _list_pyenv_versions(self) -> list[str]:
        """The bin folders of pyenv's installed CPython versions, newest first (none without pyenv)."""
        pyenv = self.which("pyenv")
        if pyenv is None:
            return []
        try:
            root = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=PROBE_TIMEOUT).stdout
            listed = subprocess.run(
                [pyenv, "versions", "--bare"], capture_output=True, text=True, timeout=PROBE_TIMEOUT
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return []
        versions = [v for v in listed.split() if re.fullmatch(r"\d+\.\d+\.\d+", v)]
        versions.sort(key=lambda v: tuple(int(n) for n in v.split(".")), reverse=True)
        return [str(Path(root.strip()) / "versions" / v / "bin") for v in versions]

    def find(self, minor: str) -> Interpreter | None:
        """The first ``python{minor}`` that answers with that version: pyenv's, scripts/get-python's, the PATH's."""
        if minor in self.found:
            return self.found[minor]
        fetched = [str(debian_python(minor).parent)] if minor in DEBIAN_PYTHONS else []
        folders = self._pyenv_bins(minor) + fetched + self.path.split(os.pathsep)
        for folder in folders:
            candidate = os.path.join(folder, f"python{minor}")
            if not os.access(candidate, os.X_OK):
                continue
            version = _version_of(candidate)
            if version is not None and (version + ".").startswith(minor + "."):
                self.found[minor] = Interpreter(candidate, version)
                return self.found[minor]
        return None

    def fetchers(self) -> list[str]:
        """The tools installed here that can get an interpreter, quickest first."""
        return [tool for tool in FETCH_COMMAND if self.which(tool)]

    def fetch(self, minor: str) -> tuple[Interpreter | None, list[str]]:
        """Try each fetcher (bounded) until ``python{minor}`` answers; the interpreter, and one line per failure."""
        failures: list[str] = []
        for tool in self.fetchers():
            command = [tool, *FETCH_COMMAND[tool], minor]
            bound = FETCH_TIMEOUT[tool]
            print(f"{PREFIX} no python{minor}: trying `{' '.join(command)}` (at most {bound} s)", flush=True)
            error = self._run_fetcher(tool, command)
            if error is None:
                interpreter = self._fetched(tool, minor)
                if interpreter is not None:
                    return interpreter, failures
                error = "it succeeded, but no python" + minor + " answers"
            failures.append(f"`{' '.join(command)}` failed: {error}")
        return None, failures

    def _run_fetcher(self, tool: str, command: list[str]) -> str | None:
        """Run one fetch command quietly; None on success, else its last line of output."""
        # pyenv leaves its build log in TMPDIR on failure: keep that out of the user's /tmp.
        with tempfile.TemporaryDirectory(prefix="run-tests-") as scratch:
            env = dict(os.environ, PATH=self.path, TMPDIR=scratch)
            executable = self.which(tool) or tool
            try:
                done = subprocess.run(
                    [executable, *command[1:]],
                    capture_output=True,
                    text=True,
                    timeout=FETCH_TIMEOUT[tool],
                    stdin=subprocess.DEVNULL,
                    env=env,
                )
            except subprocess.TimeoutExpired:
                return f"no result within {FETCH_TIMEOUT[tool]} s"
            except OSError as exc:
                return str(exc)
        if done.returncode == 0:
            return None
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        return f"exit {done.returncode}" + (f": {lines[-1]}" if lines else "")

    def _fetched(self, tool: str, minor: str) -> Interpreter | None:
        """Where ``tool`` put ``python{minor}`` (uv: ``uv python find``; pyenv: its versions folder)."""
        if tool == "uv":
            uv = self.which("uv") or "uv"
            try:
                where = subprocess.run(
                    [uv, "python", "find", minor], capture_output=True, text=True, timeout=PROBE_TIMEOUT
                ).stdout.strip()
            except (OSError, subprocess.TimeoutExpired):
                return None
            version = _version_of(where) if where else None
            if version is None or not (version + ".").startswith(minor + "."):
                return None
            self.found[minor] = Interpreter(where, version)
            return self.found[minor]
        self._pyenv_versions = None  # pyenv has one more version now
        return self.find(minor)

    def how_to_get(self, minor: str) -> str:
        """The command that gets ``python{minor}``: with the tools installed here, else with either."""
        hints = {"uv": f"uv python install {minor}", "pyenv": f"pyenv install {minor}"}
        ways = [hints[tool] for tool in self.fetchers() or ["pyenv", "uv"]]
        if minor in DEBIAN_PYTHONS:  # pyenv and uv download from python.org and GitHub; this needs a Debian mirror
            ways.append(f"scripts/get-python {minor}")
        return " or ".join(ways)

    def where_to_get_tools(self) -> str | None:
        """Where to get pyenv or uv, when neither is installed."""
        if self.fetchers():
            return None
        return "pyenv: https://github.com/pyenv/pyenv#installation, uv: https://docs.astral.sh/uv/"

    def tox_path(self) -> str:
        """The PATH tox gets: each found interpreter's folder first, so tox's discovery finds the same ones."""
        folders: list[str] = []
        for interpreter in self.found.values():
            folder = os.path.dirname(interpreter.path)
            if folder not in folders:
                folders.append(folder)
        return os.pathsep.join([*folders, self.path])


# -- the plan and the run ------------------------------------------------------------------------------


def split_args(args: Sequence[str]) -> tuple[list[str] | None, list[str]]:
    """The environments named with ``-e``/``--env`` (None if none), and every other argument for tox."""
    envs: list[str] | None = None
    rest: list[str] = []
    items = list(args)
    index = 0
    while index < len(items):
        arg = items[index]
        if arg == "--":
            rest += items[index:]
            break
        value: str | None = None
        if arg in ("-e", "--env") and index + 1 < len(items):
            value, index = items[index + 1], index + 1
        elif arg.startswith("--env="):
            value = arg[len("--env=") :]
        elif arg.startswith("-e") and len(arg) > 2:
            value = arg[2:]
        if value is None:
            rest.append(arg)
        else:
            envs = (envs or []) + _names(value)
        index += 1
    return envs, rest


@dataclass
class Plan:
    """Each environment and the interpreter it runs on (None: missing), in tox.ini's order."""

    required: bool
    rows: list[tuple[str, str | None, Interpreter | None]]

    @property
    def runnable(self) -> list[str]:
        """The environments whose interpreter was found (or that run on tox's own)."""
        return [env for env, minor, found in self.rows if minor is None or found is not None]

    @property
    def missing(self) -> list[tuple[str, str]]:
        """The environments without an interpreter, with the ``3.X`` each needs."""
        return [(env, minor) for env, minor, found in self.rows if minor is not None and found is None]


def make_plan(ini: ToxIni, machine: Machine, envs: list[str] | None, ci: bool, fetch: bool) -> Plan:
    """Find (and with ``fetch``, try to get) each environment's interpreter."""
    selected = ini.env_list if envs is None else ini.all_envs() if envs == ["ALL"] else envs
    needs = [(env, ini.interpreter(env)) for env in selected]
    missing_minors = sorted({minor for _env, minor in needs if minor is not None and machine.find(minor) is None})
    failures: dict[str, list[str]] = {}
    if fetch:
        for minor in missing_minors:
            failures[minor] = machine.fetch(minor)[1]
    rows = [(env, minor, machine.find(minor) if minor else None) for env, minor in needs]
    plan = Plan(required=ci or envs is not None, rows=rows)
    for minor, lines in failures.items():
        if machine.find(minor) is None:
            for line in lines:
                print(f"{PREFIX} could not get python{minor}: {line}", flush=True)
    return plan


def print_plan(plan: Plan, machine: Machine) -> None:
    """One line per environment: run (with which interpreter) or skip/MISSING (with how to get it)."""
    width = max((len(env) for env, _m, _f in plan.rows), default=0)
    for env, minor, found in plan.rows:
        name = f"python{minor}" if minor else "tox's python"
        if minor is None or found is not None:
            where = f"{found.path} ({found.version})" if found else "(the one tox runs on)"
            print(f"{PREFIX} run     {env:<{width}}  {name:<12} {where}")
        else:
            status = "MISSING" if plan.required else "skip   "
            print(f"{PREFIX} {status} {env:<{width}}  {name:<12} not found; get it: {machine.how_to_get(minor)}")
    if plan.missing and machine.where_to_get_tools():
        print(f"{PREFIX} {machine.where_to_get_tools()}")


def print_not_run(plan: Plan, machine: Machine) -> None:
    """After the run: name each environment that did not run and how to get its interpreter."""
    for env, minor in plan.missing:
        print(f"{PREFIX} not run: {env} (no python{minor}; get it: {machine.how_to_get(minor)})")
    if plan.missing and machine.where_to_get_tools():
        print(f"{PREFIX} {machine.where_to_get_tools()}")


def is_ci(environ: dict[str, str]) -> bool:
    """CI=true (or 1/yes), as CI services set it."""
    return environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def own_options(args: Sequence[str]) -> tuple[bool, str | None, list[str]]:
    """This script's options (``--plan``, ``--tox TOX``; before any ``--``) and the arguments left for tox."""
    plan_only, tox, rest = False, None, []
    items = iter(args)
    for arg in items:
        if arg == "--":
            rest += ["--", *items]
        elif arg == "--plan":
            plan_only = True
        elif arg == "--tox":
            tox = next(items, None)
        elif arg.startswith("--tox="):
            tox = arg[len("--tox=") :]
        else:
            rest.append(arg)
    return plan_only, tox, rest


#: What tox-uv's uv is told (the README's command installs tox-uv beside tox): fetch no
#: interpreter behind the plan, which has decided which ones exist; and trust the machine's
#: certificate store as pip does (uv's own roots refuse a TLS-inspecting proxy's certificate:
#: "invalid peer certificate: UnknownIssuer"), under its name now and the one older uv reads.
UV_ENVIRONMENT = {"UV_PYTHON_DOWNLOADS": "never", "UV_SYSTEM_CERTS": "true", "UV_NATIVE_TLS": "true"}


def tox_environment(machine: Machine) -> dict[str, str]:
    """The environment tox runs in: the found interpreters first on PATH, and :data:`UV_ENVIRONMENT`."""
    return dict(os.environ, PATH=machine.tox_path(), **UV_ENVIRONMENT)


def main(argv: Sequence[str]) -> int:
    """``--plan`` prints the plan; ``--tox TOX`` gets interpreters and runs the runnable environments."""
    # Line by line, so this script's lines and tox's keep their order in a log.
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    plan_only, tox, own = own_options(argv)
    if not plan_only and tox is None:
        print(f"{PREFIX} --plan or --tox TOX is needed", file=sys.stderr)
        return 2
    envs, rest = split_args(own)
    ci = is_ci(dict(os.environ))
    try:
        ini = ToxIni()
        machine = Machine(path=os.environ.get("PATH", os.defpath))
        plan = make_plan(ini, machine, envs, ci=ci, fetch=not plan_only)
    except ValueError as exc:
        print(f"{PREFIX} {exc}", file=sys.stderr)
        return 2
    if ci:
        print(f"{PREFIX} CI=true: the whole matrix is required; a missing interpreter is an error")
    print_plan(plan, machine)
    if plan.required and plan.missing:
        names = " ".join(env for env, _minor in plan.missing)
        print(f"{PREFIX} missing interpreter(s) for: {names}", file=sys.stderr)
        return 1
    if not plan.runnable:
        print(f"{PREFIX} nothing can run here: no interpreter for any environment", file=sys.stderr)
        return 1
    if plan_only:
        print(f"{PREFIX} would run: {' '.join(plan.runnable)}")
        if plan.missing:
            print(f"{PREFIX} would not run: {' '.join(env for env, _m in plan.missing)}")
            if machine.fetchers():
                print(f"{PREFIX} a run first tries to get their interpreters with: {', '.join(machine.fetchers())}")
        return 0
    assert tox is not None
    command = [tox, "run", "-e", ",".join(plan.runnable), *rest]
    status = subprocess.run(command, env=tox_environment(machine)).returncode
    print_not_run(plan, machine)
    verdict = "passed" if status == 0 else f"failed (tox exit {status})"
    print(f"{PREFIX} {' '.join(plan.runnable)}: {verdict}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

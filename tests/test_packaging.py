"""The sdist and the wheel of graceful-wsgi: built without warnings, checked by twine, installed and served from."""

from __future__ import annotations

import contextlib
import email
import http.client
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
import venv
import zipfile
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

import pytest

import graceful
from tests.conftest import ROOT, Processes
from tests.e2e_harness import free_port, http_get

# One pytest-xdist worker runs the module: `python -m build` writes graceful_wsgi.egg-info into the
# source tree, and two builds at once there break each other's sdist.
pytestmark = pytest.mark.xdist_group("build-in-the-source-tree")
#: The name on PyPI; file names spell it graceful_wsgi. The import name stays ``graceful``.
DIST_NAME = "graceful-wsgi"
FILE_NAME = DIST_NAME.replace("-", "_")

#: Each extra and the modules it must make importable (next to graceful).
EXTRAS = {
    "flask": ["flask", "graceful.flask"],
    "django": ["django"],
    "asgi": ["uvicorn", "graceful.uvicorn.server"],
    "gevent": ["gevent", "packaging"],
    "prometheus": ["prometheus_client"],
    "http2": ["h2"],
    "plot": ["matplotlib"],
}


@dataclass
class Built:
    """What ``python -m build`` made, and what it printed."""

    wheel: Path
    sdist: Path
    log: str


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Build the sdist and the wheel once (python -m build, as a release would)."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob(f"{FILE_NAME}-*.whl")
    (sdist,) = out.glob(f"{FILE_NAME}-*.tar.gz")
    return Built(wheel, sdist, done.stdout + done.stderr)


def wheel_metadata(wheel: Path) -> Message:
    """The wheel's METADATA as a message (one header per field)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(archive.read(name))


def fresh_venv(where: Path) -> Path:
    """A new venv (without pip: this environment's pip installs into it); its python."""
    venv.create(where, with_pip=False)
    return where / "bin" / "python"


def pip_install(python: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """This environment's pip, installing into the venv of ``python``."""
    argv = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--disable-pip-version-check"]
    return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout)


def outside_env(home: Path) -> dict[str, str]:
    """This environment without what would make the checkout importable, and a HOME of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRACEFUL_") and k != "PYTHONPATH"}
    # HOME: Gunicorn 25+ puts its control socket there; matplotlib its cache.
    env.update(HOME=str(home), PYTHONUNBUFFERED="1", MPLCONFIGDIR=str(home / "mpl"))
    return env


class TestBuild:
    def test_build_prints_no_deprecation_warning(self, built: Built) -> None:
        """The build prints no deprecation (e.g. of license classifiers) and no warning about the metadata."""
        assert not re.search(r"deprecat", built.log, re.IGNORECASE), built.log
        assert "License classifiers" not in built.log

    def test_twine_check_passes(self, built: Built) -> None:
        """twine check --strict accepts both files (PyPI would render the README)."""
        done = subprocess.run(
            [sys.executable, "-m", "twine", "check", "--strict", str(built.wheel), str(built.sdist)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.count("PASSED") == 2


class TestWheel:
    def test_metadata_names_the_distribution_and_an_spdx_license(self, built: Built) -> None:
        """Name graceful-wsgi, the version of graceful/__init__.py, License-Expression MIT, no license classifier."""
        meta = wheel_metadata(built.wheel)
        assert meta["Name"] == DIST_NAME
        assert meta["Version"] == graceful.__version__
        assert meta["License-Expression"] == "MIT"
        assert not [c for c in meta.get_all("Classifier", []) if c.startswith("License ::")]

    def test_metadata_declares_each_extra(self, built: Built) -> None:
        """Every extra a user can ask for is declared (and the test extra, for development)."""
        assert set(wheel_metadata(built.wheel).get_all("Provides-Extra", [])) == {*EXTRAS, "test"}

    def test_carries_the_package_py_typed_license_and_console_script(self, built: Built) -> None:
        """The wheel holds graceful/__init__.py, conf.py, py.typed, the license and the console script."""
        with zipfile.ZipFile(built.wheel) as archive:
            names = archive.namelist()
            entry_points = next(n for n in names if n.endswith("entry_points.txt"))
            assert "graceful = graceful.cli:main" in archive.read(entry_points).decode()
        assert {"graceful/__init__.py", "graceful/conf.py", "graceful/py.typed"} <= set(names)
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)

    def test_carries_every_module_of_the_package(self, built: Built) -> None:
        """Every .py file under graceful/ in the source tree, subpackages included, is in the wheel."""
        sources = {path.relative_to(ROOT).as_posix() for path in (ROOT / "graceful").rglob("*.py")}
        with zipfile.ZipFile(built.wheel) as archive:
            assert sources <= set(archive.namelist())

    def test_carries_nothing_but_the_package(self, built: Built) -> None:
        """Every file is under graceful/ or the dist-info: nothing from tests/, examples/ or bench/."""
        with zipfile.ZipFile(built.wheel) as archive:
            tops = {name.split("/", 1)[0] for name in archive.namelist()}
        assert tops == {"graceful", f"{FILE_NAME}-{graceful.__version__}.dist-info"}


class TestSdist:
    def test_carries_readme_license_and_sources(self, built: Built) -> None:
        """The sdist holds the README (the long description), the license and the package."""
        with tarfile.open(built.sdist) as archive:
            names = archive.getnames()
        top = f"{FILE_NAME}-{graceful.__version__}"
        for name in ("README.md", "LICENSE", "setup.cfg", "graceful/__init__.py", "graceful/conf.py"):
            assert f"{top}/{name}" in names, name


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel and no other download: its python.

    The dependencies come from this test environment: a .pth adds the folders they live in,
    after the new venv's own site-packages, where the wheel went. It is added after the
    install, so pip does not take this environment's graceful for the wheel's.
    """
    python = fresh_venv(tmp_path_factory.mktemp("wheel-venv") / "venv")
    done = pip_install(python, "--no-deps", str(built.wheel), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    import gunicorn
    import werkzeug
    import yaml

    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    folders = {str(Path(m.__file__).resolve().parent.parent) for m in (gunicorn, werkzeug, yaml)}
    (Path(site) / "deps.pth").write_text("\n".join(sorted(folders)) + "\n")
    return python


class TestInstalledWheel:
    def test_imports_from_the_venv_and_runs_its_cli(self, installed: Path, tmp_path: Path) -> None:
        """Installed from the wheel, graceful imports from the venv (not the checkout) and prints its version."""
        probe = "import graceful, graceful.conf, pathlib; print(pathlib.Path(graceful.__file__).parent)"
        env = outside_env(tmp_path)
        where = subprocess.run(
            [str(installed), "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True, env=env
        )
        assert where.stdout.strip().startswith(str(installed.parent.parent))
        version = subprocess.run(
            [str(installed.with_name("graceful")), "--version"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        assert version.stdout.strip() == f"graceful {graceful.__version__}"

    @pytest.mark.e2e
    @pytest.mark.gunicorn
    def test_gunicorn_with_the_installed_conf_serves_readyz(
        self, installed: Path, tmp_path: Path, processes: Processes
    ) -> None:
        """`gunicorn -c python:graceful.conf` from the venv, outside the checkout, answers /readyz 200."""
        app_dir = tmp_path / "app"
        app_dir.mkdir()
        (app_dir / "hello.py").write_text(
            "import graceful\n\n\n"
            "def app(environ, start_response):\n"
            "    body = graceful.__file__.encode()\n"
            "    start_response('200 OK', [('Content-Type', 'text/plain'), ('Content-Length', str(len(body)))])\n"
            "    return [body]\n"
        )
        port = free_port()
        argv = [str(installed), "-m", "gunicorn", "-c", "python:graceful.conf", "-b", f"127.0.0.1:{port}", "hello:app"]
        proc = processes.start(argv, env=outside_env(tmp_path), cwd=app_dir)
        status = wait_for_readyz(proc, port, timeout=30)
        assert status == 200, read_all(proc)
        # The app's graceful, and so the config's, is the venv's copy.
        assert http_get(port, "/")[2].decode().startswith(str(installed.parent.parent))


def wait_for_readyz(proc: subprocess.Popen[str], port: int, timeout: float) -> int | None:
    """Poll /readyz until it answers 200 or the process exits or ``timeout`` passes; the last status."""
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError, http.client.HTTPException):
            status = http_get(port, "/readyz", timeout=1.0)[0]
            if status == 200:
                return status
        time.sleep(0.1)
    return status


def read_all(proc: subprocess.Popen[str]) -> str:
    """What a process printed, once its group (its workers too) is killed: for a failure message."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    assert proc.stdout is not None
    return proc.stdout.read()


@pytest.mark.extras
class TestExtras:
    @pytest.mark.parametrize("extra", sorted(EXTRAS))
    @pytest.mark.timeout(900)
    def test_extra_installs_and_imports(self, extra: str, built: Built, tmp_path: Path) -> None:
        """`pip install 'graceful-wsgi[EXTRA]'` (from the wheel, dependencies from PyPI) into a fresh venv imports."""
        python = fresh_venv(tmp_path / "venv")
        install = pip_install(python, f"{built.wheel}[{extra}]", timeout=600)
        assert install.returncode == 0, install.stdout + install.stderr
        modules = ["graceful", *EXTRAS[extra]]
        probe = f"import {', '.join(modules)}; print(graceful.__file__)"
        done = subprocess.run(
            [str(python), "-c", probe],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env=outside_env(tmp_path),
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().startswith(str(tmp_path / "venv"))


class TestChangelog:
    def test_newest_section_is_this_version(self) -> None:
        """CHANGELOG.md's first version heading is graceful.__version__ (a bump comes with its entry)."""
        headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
        assert headings and headings[0] == graceful.__version__

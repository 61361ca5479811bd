"""The wheel and the sdist build, install into a fresh venv and import, with py.typed inside."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the sdist and the wheel once (python -m build, as a release would)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return out


class TestDistributions:
    def test_wheel_carries_package_and_py_typed(self, dist: Path) -> None:
        """The wheel holds every module, py.typed and the console script."""
        (wheel,) = dist.glob("graceful-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            names = archive.namelist()
            entry_points = next(n for n in names if n.endswith("entry_points.txt"))
            assert "graceful = graceful.cli:main" in archive.read(entry_points).decode()
        assert "graceful/py.typed" in names and "graceful/conf.py" in names

    def test_sdist_carries_readme_and_sources(self, dist: Path) -> None:
        """The sdist holds the README (the long description) and the package."""
        (sdist,) = dist.glob("graceful-*.tar.gz")
        with tarfile.open(sdist) as archive:
            names = archive.getnames()
        assert any(n.endswith("/README.md") for n in names)
        assert any(n.endswith("/graceful/core/lifecycle.py") for n in names)

    def test_wheel_installs_and_imports_in_a_fresh_venv(self, dist: Path, tmp_path: Path) -> None:
        """Installed from the wheel (dependencies from this environment), graceful imports and runs its CLI."""
        (wheel,) = dist.glob("graceful-*.whl")
        env_dir = tmp_path / "venv"
        venv.create(env_dir, with_pip=True)
        python = env_dir / "bin" / "python"
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
        # The dependencies come from this test environment (no download): a .pth adds the
        # folders they live in, after the new venv's own site-packages, where the wheel went.
        # Added after the install, so pip does not take this environment's graceful for it.
        import gunicorn
        import werkzeug
        import yaml

        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        folders = {str(Path(m.__file__).resolve().parent.parent) for m in (gunicorn, werkzeug, yaml)}
        (Path(site) / "deps.pth").write_text("\n".join(sorted(folders)) + "\n")
        # Run from an empty folder so the source tree is not what gets imported.
        probe = "import graceful, graceful.conf, pathlib; print(pathlib.Path(graceful.__file__).parent)"
        where = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
        assert str(env_dir) in where.stdout
        version = subprocess.run(
            [str(env_dir / "bin" / "graceful"), "--version"], cwd=tmp_path, capture_output=True, text=True, check=True
        )
        assert "0.1.0" in version.stdout + version.stderr

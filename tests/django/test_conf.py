"""graceful.django.conf: graceful.conf's hooks, after settings.GRACEFUL configured the master's lifecycle."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.django.project import PROJECT, project_env

PROBE = """
import json
import graceful.django.conf as conf
import graceful, graceful.conf
print(json.dumps({
    "same_hooks": conf.__all__ == graceful.conf.__all__
        and all(getattr(conf, name) is getattr(graceful.conf, name) for name in conf.__all__),
    "delay": graceful.default_lifecycle.config.shutdown_delay,
    "graceful_timeout": conf.graceful_timeout,
    "django_set_up": __import__("django.apps").apps.apps.ready,
}))
"""


class TestDjangoGunicornConfig:
    def test_reads_the_settings_before_the_hooks_derive_graceful_timeout(self, tmp_path: Path) -> None:
        """The master's config comes from settings.GRACEFUL; graceful_timeout is derived from it; no django.setup()."""
        env = project_env(tmp_path, {"SHUTDOWN_DELAY": 2, "DRAIN_TIMEOUT": 20, "HOOK_TIMEOUT": 4})
        out = subprocess.run(
            [sys.executable, "-c", PROBE], cwd=PROJECT, env=env, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        # graceful_timeout = ceil(drain_timeout 20 + hook_timeout 4 + margin 1): from the settings, not the defaults.
        assert json.loads(out.stdout) == {
            "same_hooks": True,
            "delay": 2.0,
            "graceful_timeout": 25,
            "django_set_up": False,
        }

    def test_after_graceful_conf_it_refuses_with_one_line(self, tmp_path: Path) -> None:
        """Imported after graceful.conf (graceful_timeout already derived without the settings): exit 1, saying so."""
        code = "import graceful.conf, graceful.django.conf"
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=PROJECT,
            env=project_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (out.returncode, out.stderr) == (
            1,
            "graceful: import graceful.django.conf instead of graceful.conf, not after it\n",
        )

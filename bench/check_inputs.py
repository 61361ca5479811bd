"""``graceful check`` on large and hostile inputs: time and peak memory, beside PyYAML's own loader.

    python bench/check_inputs.py [--rounds 3]

Generates, in a temporary directory, the inputs of issue 17 (tests/kubernetes/hostile.py):
a 20 MB manifest of 69,242 graceful Pods, a 9-level alias bomb inside a container's
``args``, and 10,000-deep nesting. Each is checked by a fresh ``python -m graceful check``;
for context, the same run also times ``yaml.load_all`` with libyaml's ``CSafeLoader`` on the
20 MB file (parsing alone, no checking). Prints wall time, CPU time and peak resident memory
(the median round), and the load average, which moves wall time a lot on a shared machine:
CPU time is the steadier figure. Not a test: nothing here fails a build.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.kubernetes import hostile  # noqa: E402

#: Run a statement in a fresh interpreter and print its wall time, CPU time and peak RSS.
_MEASURE = """
import resource, sys, time
start, cpu = time.perf_counter(), time.process_time()
status = 0
{body}
usage = resource.getrusage(resource.RUSAGE_SELF)
print("measured", time.perf_counter() - start, time.process_time() - cpu, usage.ru_maxrss // 1024, status)
"""

_CHECK = """
import contextlib, io
from graceful.cli import main
with contextlib.redirect_stderr(io.StringIO()) as err:
    status = main(["check", sys.argv[1]])
"""

_PYYAML = """
import yaml
with open(sys.argv[1], encoding="utf-8") as stream:
    for _ in yaml.load_all(stream, Loader=yaml.CSafeLoader):
        pass
"""


def _measure(body: str, path: Path) -> tuple[float, float, int, int]:
    """Return wall seconds, CPU seconds, peak RSS in MB and the status of one fresh run."""
    code = _MEASURE.format(body=body)
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
        check=True,
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("measured "))
    wall, cpu, rss, status = line.split()[1:]
    return float(wall), float(cpu), int(rss), int(status)


def main() -> None:
    """Generate the inputs, measure each, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each input; the median is shown")
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{load:.2f}' for load in os.getloadavg())}, CPUs: {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as directory:
        big = Path(directory) / "big.yaml"
        size = hostile.write_big_manifest(big)
        bomb = Path(directory) / "bomb.yaml"
        bomb.write_text(hostile.alias_bomb_in_container(), encoding="utf-8")
        deep = Path(directory) / "deep.yaml"
        deep.write_text(hostile.deep_nesting(10_000), encoding="utf-8")
        rows = [
            (f"yaml.load_all, CSafeLoader: {size / 1e6:.1f} MB, {hostile.BIG_DOCUMENTS:,} documents", _PYYAML, big, ""),
            (f"graceful check: the same {size / 1e6:.1f} MB", _CHECK, big, "< 10 s, < 300 MB"),
            ("graceful check: 9-level alias bomb in a container's args", _CHECK, bomb, "< 2 s, < 200 MB"),
            ("graceful check: 10,000-deep nesting", _CHECK, deep, "exit 2"),
        ]
        print("\n| input | wall s | CPU s | peak RSS MB | exit | target |\n|---|---|---|---|---|---|")
        for title, body, path, target in rows:
            runs = [_measure(body, path) for _ in range(args.rounds)]
            wall = statistics.median(run[0] for run in runs)
            cpu = statistics.median(run[1] for run in runs)
            rss = max(run[2] for run in runs)
            status = runs[-1][3]
            print(f"| {title} | {wall:.2f} | {cpu:.2f} | {rss} | {status} | {target} |")


if __name__ == "__main__":
    main()

"""``graceful timeline REPORT.json -o timeline.svg``: a picture of one shutdown, drawn from its record.

The record is what ``GRACEFUL_REPORT_FILE`` received (:mod:`graceful.core.record`).
The picture has one time axis, from ShutdownInitiated to the exit:

* above, every hook and cleanup task (each process's) as a bar from its
  start for its duration, coloured by outcome (ok, failed, timed out);
* below, the requests in flight (all processes summed), and the arrivals
  and rejections per second, from the record's samples;
* every lifecycle signal as a numbered vertical line across both, listed
  with its time beside the picture; the shutdown delay shaded.

The format follows the output's suffix: ``.svg`` or ``.png``. Drawing needs
matplotlib, the optional ``plot`` extra; without it the command says how to
install it. A file that is not a record gives one line and exit status 2,
never a traceback. Runs in the command's own process, on its main thread.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from graceful.core.record import HookEntry, RecordError, ShutdownRecord

__all__ = ["FORMATS", "TimelineError", "draw", "main", "read_record"]

#: The output formats, by suffix.
FORMATS = {".svg": "svg", ".png": "png"}
#: A record larger than this is not one graceful wrote.
MAX_RECORD_BYTES = 64 << 20
#: Above this many hook runs, bars are drawn per hook (the runs of all processes together).
MAX_BARS = 40
#: Arrivals and rejections per second are averaged over at least this many seconds.
RATE_WINDOW = 0.1

INSTALL = "matplotlib is not installed: pip install 'graceful-wsgi[plot]'"

_COLOURS = {"ok": "#2e7d32", "failed": "#c62828", "timed out": "#ef6c00"}
_OTHER = "#757575"
_SEVERITY = {"ok": 0, "timed out": 1, "failed": 2}


class TimelineError(ValueError):
    """The command cannot do what it was asked; the message is the one line it prints."""


def read_record(path: str) -> ShutdownRecord:
    """Read and check the record in ``path``; :class:`TimelineError` when it cannot be read or is not one."""
    try:
        with open(path, "rb") as stream:
            data = stream.read(MAX_RECORD_BYTES + 1)
    except OSError as exc:
        raise TimelineError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_RECORD_BYTES:
        raise TimelineError(f"{path}: larger than {MAX_RECORD_BYTES >> 20} MB, not a shutdown record")
    try:
        parsed = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TimelineError(f"{path}: not JSON: {_one_line(exc)}") from None
    try:
        return ShutdownRecord.from_json(parsed, os.path.basename(path))
    except RecordError as exc:
        raise TimelineError(f"not a graceful shutdown record: {exc}") from None


def draw(record: ShutdownRecord, output: str) -> None:
    """Draw ``record`` into ``output`` (its suffix picks the format).

    Raises :class:`TimelineError` for an unknown suffix, a missing matplotlib
    or a file that cannot be written.
    """
    suffix = os.path.splitext(output)[1].lower()
    if suffix not in FORMATS:
        raise TimelineError(f"{output}: the output must end in {' or '.join(FORMATS)}")
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display: files only
        import matplotlib.pyplot as plt
    except ImportError:
        raise TimelineError(INSTALL) from None
    # Cosmetic warnings (a label that does not fit) must not stop a picture, nor reach the user as noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figure = _figure(plt, record)
        try:
            figure.savefig(output, format=FORMATS[suffix], dpi=100, bbox_inches="tight")
        except OSError as exc:
            raise TimelineError(f"cannot write {output}: {exc.strerror or exc}") from None
        except (ValueError, OverflowError, RuntimeError) as exc:
            raise TimelineError(f"cannot draw this record: {_one_line(exc)}") from None
        finally:
            plt.close(figure)


def main(argv: Sequence[str]) -> int:
    """``graceful timeline RECORD -o OUTPUT``: 0 when drawn, 2 (and one line on stderr) otherwise."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="graceful timeline",
        description="Draw a shutdown record (GRACEFUL_REPORT_FILE) as a timeline picture.",
    )
    parser.add_argument("record", metavar="RECORD.json", help="the shutdown record")
    parser.add_argument(
        "-o", "--output", required=True, metavar="PICTURE", help="where to draw it: a .svg or .png file"
    )
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # --help, usage errors
        return 0 if exc.code in (0, None) else 2
    try:
        draw(read_record(args.record), args.output)
    except TimelineError as exc:
        print(f"graceful timeline: error: {exc}", file=sys.stderr)
        return 2
    return 0


# -- drawing ---------------------------------------------------------------------------


def _figure(plt: Any, record: ShutdownRecord) -> Any:
    bars = _bars(record.hooks)
    samples = record.samples
    end = max([record.duration, *(samples.t[-1:]), *(h.started + h.duration for h in bars if h.started is not None)])
    start = min([0.0, *(samples.t[:1]), *(h.started for h in bars if h.started is not None)])
    span = max(end - start, 0.1)
    figure, (hooks_axis, requests_axis) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(12, 4.2 + 0.3 * len(bars)),
        gridspec_kw={"height_ratios": [0.3 * len(bars) + 0.9, 3]},
        layout="constrained",
    )
    state = "clean" if record.ok else "with problems"
    figure.suptitle(
        f"graceful shutdown of {record.server or 'a server'} {record.worker_class} (pid {record.pid}):"
        f" {record.duration:.2f} s, {state}"
    )
    _draw_hooks(hooks_axis, bars)
    _draw_requests(requests_axis, record)
    for axis in (hooks_axis, requests_axis):
        _draw_signals(axis, record, numbered=axis is hooks_axis)
        axis.set_xlim(start - 0.02 * span, start + 1.02 * span)
        axis.grid(axis="x", alpha=0.3)
    requests_axis.set_xlabel("seconds since ShutdownInitiated")
    figure.text(1.0, 0.5, _signal_list(record), fontsize=8, family="monospace", va="center", ha="left")
    return figure


def _bars(hooks: Sequence[HookEntry]) -> list[HookEntry]:
    """The bars to draw: every run, or with many, one per hook (earliest start, longest run, worst outcome)."""
    if len(hooks) <= MAX_BARS:
        return list(hooks)
    grouped: dict[tuple[str, str], HookEntry] = {}
    for hook in hooks:
        seen = grouped.get((hook.kind, hook.name))
        if seen is None:
            grouped[(hook.kind, hook.name)] = HookEntry(
                hook.kind, hook.name, 0, hook.outcome, hook.started, hook.duration
            )
            continue
        worst = max(seen.outcome, hook.outcome, key=lambda outcome: _SEVERITY.get(outcome, 3))
        starts = [s for s in (seen.started, hook.started) if s is not None]
        grouped[(hook.kind, hook.name)] = HookEntry(
            hook.kind, hook.name, 0, worst, min(starts) if starts else None, max(seen.duration, hook.duration)
        )
    return list(grouped.values())[:MAX_BARS]


def _draw_hooks(axis: Any, bars: Sequence[HookEntry]) -> None:
    if not bars:
        axis.set_yticks([])
        axis.text(0.5, 0.5, "no hooks or cleanup tasks", transform=axis.transAxes, ha="center", va="center")
        return
    labels = []
    for row, hook in enumerate(bars):
        colour = _COLOURS.get(hook.outcome, _OTHER)
        axis.barh(row, max(hook.duration, 0.002), left=hook.started or 0.0, color=colour, height=0.6)
        labels.append(f"{hook.kind}: {hook.name}" + (f" ({hook.pid})" if hook.pid else ""))
    axis.set_yticks(range(len(bars)), labels=[_short(label, 48) for label in labels], fontsize=8)
    axis.invert_yaxis()
    handles = [_patch(colour, outcome) for outcome, colour in _COLOURS.items()]
    axis.legend(handles=handles, loc="lower right", fontsize=8, framealpha=0.8)


def _patch(colour: str, label: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(color=colour, label=label)


def _draw_requests(axis: Any, record: ShutdownRecord) -> None:
    samples = record.samples
    axis.set_ylabel("requests in flight")
    if not samples.t:
        axis.text(0.5, 0.5, "no samples", transform=axis.transAxes, ha="center", va="center")
        return
    from matplotlib.ticker import MaxNLocator

    axis.step(samples.t, samples.in_flight, where="post", color="#1565c0", linewidth=1.6, label="in flight")
    axis.set_ylim(0, max(1, *samples.in_flight) * 1.15)
    axis.yaxis.set_major_locator(MaxNLocator(integer=True))
    rates = axis.twinx()
    window = max(RATE_WINDOW, (samples.t[-1] - samples.t[0]) / 80)
    rates.set_ylabel(f"per second (over {window:.2g} s)")
    times, arrived = _rates(samples.t, samples.arrived, window)
    _, rejected = _rates(samples.t, samples.rejected, window)
    if times:
        rates.step(times, arrived, where="post", color="#6a1b9a", alpha=0.8, label="arrivals / s")
        rates.step(times, rejected, where="post", color="#c62828", alpha=0.8, label="rejections / s")
        rates.set_ylim(0, max(1.0, *arrived, *rejected) * 1.15)
    lines = axis.get_legend_handles_labels()
    more = rates.get_legend_handles_labels()
    axis.legend(lines[0] + more[0], lines[1] + more[1], loc="upper right", fontsize=8, framealpha=0.8)


def _rates(times: Sequence[float], totals: Sequence[int], window: float) -> tuple[list[float], list[float]]:
    """Per-second rates of a running total, over successive windows of ``window`` seconds."""
    out_t: list[float] = []
    out_r: list[float] = []
    index = 0
    while index < len(times) - 1:
        end = index + 1
        while end < len(times) - 1 and times[end] - times[index] < window:
            end += 1
        elapsed = times[end] - times[index]
        if elapsed > 0:
            out_t.append(times[index])
            out_r.append(max(0, totals[end] - totals[index]) / elapsed)
        index = end
    if out_t:  # the last step reaches the last sample
        out_t.append(times[-1])
        out_r.append(out_r[-1])
    return out_t, out_r


def _signals_in_order(record: ShutdownRecord) -> list[tuple[str, float]]:
    return sorted(record.signals.items(), key=lambda item: item[1])[:MAX_BARS]


def _draw_signals(axis: Any, record: ShutdownRecord, numbered: bool) -> None:
    delay_end = record.signals.get("AfterShutdownDelayDuration")
    if delay_end is not None and delay_end > 0:
        axis.axvspan(0.0, delay_end, color="#fff8e1", zorder=0, label="shutdown delay")
    for index, (_name, at) in enumerate(_signals_in_order(record), start=1):
        axis.axvline(at, color="#424242", linestyle="--", linewidth=0.8)
        if numbered:  # numbers above the top axis, staggered so that close signals stay readable
            axis.annotate(
                str(index),
                xy=(at, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(0, 2 + 9 * ((index - 1) % 2)),
                textcoords="offset points",
                fontsize=8,
                ha="center",
                va="bottom",
            )


def _signal_list(record: ShutdownRecord) -> str:
    """The numbered signals with their times, printed beside the picture."""
    rows = [f"{i:>2} {_short(name, 28):<28} {at:8.3f} s" for i, (name, at) in enumerate(_signals_in_order(record), 1)]
    return "\n".join(["signals (s since ShutdownInitiated)", *rows])


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a record holds")

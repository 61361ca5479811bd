"""Test helpers for /metrics over HTTP: one scrape, its samples parsed with prometheus_client's parser."""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

#: Seconds to wait for figures to show up in a scrape (Gunicorn workers publish every second).
SETTLE = 15.0
#: A scrape's samples: (name, sorted labels) -> value.
Figures = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int, method: str = "GET", timeout: float = 1.0) -> tuple[int, dict[str, str], str]:
    """One /metrics on a fresh connection, within a kubelet-like 1 s timeout: status, headers, body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, "/metrics")
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


def figures(body: str) -> Figures:
    """Every sample of a scrape, parsed with prometheus_client's parser: (name, sorted labels) -> value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def settle(port: int, read: Callable[[Figures], dict[str, float]], expected: dict[str, float]) -> dict[str, float]:
    """Scrape every 0.25 s until ``read(figures)`` equals ``expected`` (bounded by SETTLE); the last reading."""
    deadline = time.monotonic() + SETTLE
    while True:
        status, _, body = scrape(port)
        assert status == 200, body
        got = read(figures(body))
        if got == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.25)


def sample(data: Figures, metric: str, /, **labels: str) -> float:
    """The value of ``metric`` with exactly ``labels`` (0 when the scrape has no such sample)."""
    return data.get((metric, tuple(sorted(labels.items()))), 0.0)

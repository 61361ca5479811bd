"""Two views: one that reads the database, one that takes a while (to watch a drain)."""

from __future__ import annotations

import time

from django.db import connection
from django.http import HttpRequest, HttpResponse


def index(request: HttpRequest) -> HttpResponse:
    with connection.cursor() as cursor:
        cursor.execute("SELECT sqlite_version()")
        (version,) = cursor.fetchone()
    return HttpResponse(f"hello from Django, sqlite {version}\n", content_type="text/plain")


def slow(request: HttpRequest) -> HttpResponse:
    """Sleeps ``?seconds=S`` (at most 10): a SIGTERM meanwhile waits for it."""
    try:
        seconds = min(max(float(request.GET.get("seconds", "1")), 0.0), 10.0)
    except ValueError:
        seconds = 1.0
    time.sleep(seconds)
    return HttpResponse(f"slept {seconds:g}\n", content_type="text/plain")

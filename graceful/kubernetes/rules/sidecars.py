"""GC013, GC014: the sidecars that stop with a graceful app.

GC013 **warning**, native sidecars (init containers with ``restartPolicy:
Always``, KEP-753) whose drain does not fit what the app leaves of the grace
period: they get their preStop hook (a preStop sleep counts) and SIGTERM only
after the app has exited, one at a time, and the
kubelet kills whatever still runs at ``terminationGracePeriodSeconds``. The
app's own requests are done by then, so none of those is lost; what is cut is
the sidecars' own work (a proxy's last connections, a log shipper's buffer).
Probably wrong.

GC014 **error**, a classic proxy sidecar (``istio-proxy`` or an Envoy image in
``containers``) that stops before the app has finished: it gets SIGTERM with
the app and keeps carrying traffic only for its drain (Istio's
``terminationDrainDuration``, 5 s by default; plain Envoy not at all), while
the app keeps serving for ``shutdown_delay`` and draining for up to
``drain_timeout``. Requests still in flight then lose their connection and
their outbound calls. Loses requests.

Runs only in the ``graceful check`` command.
"""

from __future__ import annotations

from collections.abc import Iterator

from graceful.kubernetes.findings import Finding
from graceful.kubernetes.rules.budget import app_time, sidecar_time, whole_seconds
from graceful.kubernetes.sidecars import drain, is_istio, is_proxy
from graceful.kubernetes.subject import Subject

__all__ = ["native_sidecars", "proxy_sidecars"]


def native_sidecars(c: Subject) -> Iterator[Finding]:
    """GC013: the native sidecars' drain does not fit what is left of the grace period after the app."""
    need, names = sidecar_time(c)
    if not need:
        return
    app, _ = app_time(c)
    left = c.grace_period - app
    if need <= left:
        return
    pod = whole_seconds(app + need)
    if pod is None:
        fix = "shorten the sidecars' drain or the app's budget: no grace period fits both"
    else:
        fix = (
            f"set terminationGracePeriodSeconds: {pod} and GRACEFUL_GRACE_PERIOD={pod - c.pre_stop_sleep - need:g},"
            " or lower the app's budget"
        )
    yield c.finding(
        "warning",
        "GC013",
        f"native sidecars get their preStop and SIGTERM only after the app has exited, one at a time, and need"
        f" {need:g}s"
        f" ({names}), but the app may take {app:g}s of terminationGracePeriodSeconds {c.grace_period},"
        f" leaving {max(left, 0):g}s: they are killed mid-drain",
        fix,
    )


def proxy_sidecars(c: Subject) -> Iterator[Finding]:
    """GC014: a classic proxy sidecar stops carrying traffic while the app still serves or drains."""
    config = c.settings.config
    app = c.pre_stop_sleep + config.shutdown_delay + config.drain_timeout
    for proxy in c.workload.containers:
        if proxy is c.container or proxy.runs_graceful or not is_proxy(proxy):
            continue
        found = drain(proxy, c.workload)
        seconds = proxy.pre_stop_sleep + (found.seconds if found is not None else 0.0)
        if app <= seconds:
            continue
        why = found.why if found is not None else "its drain is unknown"
        if proxy.pre_stop_sleep:
            why = f"preStop sleep {proxy.pre_stop_sleep:g}s, then {why}"
        where = f"preStop sleep {c.pre_stop_sleep:g}s + " if c.pre_stop_sleep else ""
        target = whole_seconds(app)
        if is_istio(proxy):
            fix = (
                f"set the pod annotation proxy.istio.io/config: '{{terminationDrainDuration: {target}s}}',"
                " or run the proxy as a native sidecar (Istio's ENABLE_NATIVE_SIDECARS)"
            )
        else:
            fix = (
                f"give {proxy.name} a preStop sleep of {target}s, or run it as a native sidecar"
                " (an init container with restartPolicy: Always, stopped after the app)"
            )
        yield c.finding(
            "error",
            "GC014",
            f"{proxy.name} gets SIGTERM with the app and carries its traffic for {seconds:g}s ({why}),"
            f" but the app serves and drains for up to {where}shutdown_delay {config.shutdown_delay:g}s"
            f" + drain_timeout {config.drain_timeout:g}s = {app:g}s: requests in flight after that lose"
            " their connection",
            fix,
        )

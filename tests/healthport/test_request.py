"""graceful.healthport.request: reading one request as a WSGI server would, and its answer's bytes."""

from __future__ import annotations

import pytest

from graceful.healthport.request import NOT_FOUND, NOT_HTTP, TOO_LARGE, Probe, Refusal, encode, parse, route
from graceful.http.replies import NOT_ALLOWED, headers_for


class TestParse:
    """parse: whole requests, partial ones, junk and oversize."""

    def test_whole_request(self) -> None:
        """A request line and headers ending in a blank line give the probe."""
        assert parse(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", 8192) == Probe("readyz", None, "", False)

    def test_bare_newlines(self) -> None:
        """Lines ending in LF alone are read too."""
        assert parse(b"GET /livez HTTP/1.0\n\n", 8192) == Probe("livez", None, "", False)

    @pytest.mark.parametrize("partial", [b"", b"G", b"GET /readyz HTTP/1.1\r\n", b"GET /readyz HTTP/1.1\r\nHost: x"])
    def test_partial_waits(self, partial: bytes) -> None:
        """Until the blank line, nothing is decided."""
        assert parse(partial, 8192) is None

    @pytest.mark.parametrize("junk", [b"\x16\x03\x01\x02\x00", b"get /readyz", b"\r\n", b" GET"])
    def test_not_starting_like_a_method_is_refused_at_once(self, junk: bytes) -> None:
        """A first byte no method starts with (TLS, binary, lower case) is a 400 without waiting."""
        assert parse(junk, 8192) == Refusal(400, NOT_HTTP)

    def test_too_large_without_an_end(self) -> None:
        """More than max_request bytes without the end of the headers is a 431 (a 64 KB request line)."""
        assert parse(b"GET /" + b"a" * 9000, 8192) == Refusal(431, TOO_LARGE)

    def test_too_large_with_an_end(self) -> None:
        """Headers ending beyond max_request are a 431 too."""
        assert parse(b"GET / HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", 8192) == Refusal(431, TOO_LARGE)


class TestRoute:
    """route: the request line to a probe or a refusal, as the app's port routes paths."""

    @pytest.mark.parametrize(
        ("line", "probe"),
        [
            (b"GET /readyz?verbose HTTP/1.1", Probe("readyz", None, "verbose", False)),
            (b"HEAD /livez HTTP/1.1", Probe("livez", None, "", True)),
            (b"GET /readyz/poststarthook/warm HTTP/1.1", Probe("readyz", "poststarthook/warm", "", False)),
            (b"GET /readyz/ HTTP/1.1", Probe("readyz", "", "", False)),
            (b"GET /healthz?exclude=db&exclude=x HTTP/1.1", Probe("healthz", None, "exclude=db&exclude=x", False)),
            (b"GET http://10.0.0.1:8081/livez?verbose HTTP/1.1", Probe("livez", None, "verbose", False)),
            (b"GET /%72eadyz HTTP/1.1", Probe("readyz", None, "", False)),
            (b"GET /readyz/caf%C3%A9 HTTP/1.1", Probe("readyz", "caf\xc3\xa9", "", False)),
            (b"GET /metrics HTTP/1.1", Probe("metrics", None, "", False)),
            (b"HEAD /metrics?x HTTP/1.1", Probe("metrics", None, "x", True)),
        ],
    )
    def test_probes(self, line: bytes, probe: Probe) -> None:
        """Health paths (and /metrics) give endpoint, check and raw query as WSGI would (percent-decoded, latin-1)."""
        assert route(line) == probe

    @pytest.mark.parametrize(
        "line", [b"GET / HTTP/1.1", b"GET /readyzz HTTP/1.1", b"GET http://host HTTP/1.1", b"GET /metrics/x HTTP/1.1"]
    )
    def test_other_paths_are_404(self, line: bytes) -> None:
        """Any other path is a 404 saying what the port serves."""
        assert route(line) == Refusal(404, NOT_FOUND)

    def test_head_of_an_unknown_path_has_no_body(self) -> None:
        """HEAD of an unknown path is a 404 marked HEAD."""
        assert route(b"HEAD /nope HTTP/1.1") == Refusal(404, NOT_FOUND, head=True)

    @pytest.mark.parametrize("method", [b"POST", b"PUT", b"DELETE", b"OPTIONS"])
    def test_other_methods_are_405(self, method: bytes) -> None:
        """A health path with any method but GET and HEAD is a 405 with Allow."""
        assert route(method + b" /readyz HTTP/1.1") == Refusal(405, NOT_ALLOWED, allow="GET, HEAD")

    @pytest.mark.parametrize(
        "line", [b"GET /readyz", b"GET /readyz HTTP/2.0", b"GET  /readyz HTTP/1.1", b"G3T /readyz HTTP/1.1", b"HELLO"]
    )
    def test_malformed_lines_are_400(self, line: bytes) -> None:
        """Anything but METHOD SP TARGET SP HTTP/1.x is a 400."""
        assert route(line) == Refusal(400, NOT_HTTP)


class TestEncode:
    """encode: graceful's status lines and headers, plus Connection: close."""

    def test_response_bytes(self) -> None:
        """The status line, graceful's headers in their order, Connection: close, then the body."""
        expected_headers = "".join(f"{k}: {v}\r\n" for k, v in headers_for(b"ok"))
        assert encode(200, b"ok") == (f"HTTP/1.1 200 OK\r\n{expected_headers}Connection: close\r\n\r\nok").encode()

    def test_head_has_no_body_but_its_length(self) -> None:
        """HEAD answers carry the body's Content-Length and no body."""
        data = encode(503, b"failed\n", head=True)
        assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert b"Content-Length: 7\r\n" in data and data.endswith(b"\r\n\r\n")

    def test_allow_and_the_refusal_statuses(self) -> None:
        """405 carries Allow; 400 and 431 have their status lines."""
        assert b"\r\nAllow: GET, HEAD\r\n" in encode(405, NOT_ALLOWED, allow="GET, HEAD")
        assert encode(400, NOT_HTTP).startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert encode(431, TOO_LARGE).startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")

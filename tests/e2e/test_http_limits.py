"""The agent's HTTP endpoint under hostile or careless clients, on loopback:
slowloris sockets are closed after --web.read-header-timeout, idle
connections after --web.idle-timeout, 20,000 idle connections never stop
/metrics or /healthz (--web.max-connections closes the longest-idle ones),
oversized requests get 431, unknown paths 404 and POST 405."""

import socket
import subprocess
import sys
import time

import pytest

from helpers.agent import Agent

pytestmark = pytest.mark.tier("full")

CLOSED = "slowpath_http_connections_closed_total"


# A client process holding N idle connections to PORT until its stdin closes
# (the file limit here is 20,000 per process, so 20,000 connections take two).
HOLDER = """
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(n)]
print("connected", flush=True)
sys.stdin.read()
"""


def connect(agent, timeout=5):
    s = socket.create_connection(("127.0.0.1", agent.port), timeout=timeout)
    return s


def is_closed_by_server(sock, wait):
    """Whether the server closes `sock` within `wait` seconds."""
    sock.settimeout(wait)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def raw_request(agent, data, timeout=10):
    """Send `data` on a new connection; the status line of the answer."""
    with connect(agent, timeout) as s:
        try:
            s.sendall(data)
        except (ConnectionResetError, BrokenPipeError):
            pass
        answer = b""
        try:
            while b"\r\n" not in answer:
                chunk = s.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except ConnectionResetError:
            pass
    return answer.split(b"\r\n", 1)[0].decode(errors="replace")


@pytest.fixture
def agent(agent_bin, tmp_path):
    a = Agent(agent_bin, ["--web.read-header-timeout=2s", "--web.idle-timeout=3s"], tmp_path / "agent.log")
    yield a
    assert a.stop() == 0, a.log_text()


def test_slowloris_sockets_are_closed_after_the_header_timeout(agent):
    socks = [connect(agent) for _ in range(50)]
    start = time.monotonic()
    for s in socks:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    # One header byte each half second: never a whole header.
    closed = set()
    while time.monotonic() - start < 6 and len(closed) < len(socks):
        for i, s in enumerate(socks):
            if i in closed:
                continue
            try:
                s.sendall(b"X")
            except (ConnectionResetError, BrokenPipeError):
                closed.add(i)
                continue
            if is_closed_by_server(s, 0.01):
                closed.add(i)
        assert agent.get("/healthz", timeout=2)[0] == 200  # scrapes go on meanwhile
        time.sleep(0.5)
    elapsed = time.monotonic() - start
    assert len(closed) == 50, f"{50 - len(closed)} slowloris sockets still open after {elapsed:.1f} s"
    assert elapsed >= 1.5, elapsed  # not before the timeout
    assert agent.scrape().value(CLOSED, reason="read_header_timeout") >= 50
    for s in socks:
        s.close()


def test_idle_connections_are_closed_and_a_scraper_keeps_its_connection(agent):
    idle = connect(agent)
    idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert idle.recv(4096).startswith(b"HTTP/1.1 200")
    busy = connect(agent)
    for _ in range(5):  # a request each second: never idle for 3 s
        busy.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert busy.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(1)
    assert is_closed_by_server(idle, 0.5), "the idle connection outlived --web.idle-timeout"
    assert not is_closed_by_server(busy, 0.1)
    busy.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert busy.recv(4096).startswith(b"HTTP/1.1 200")
    assert agent.scrape().value(CLOSED, reason="idle_timeout") >= 1
    idle.close()
    busy.close()


def test_20000_idle_connections_do_not_stop_metrics_or_healthz(agent_bin, tmp_path):
    a = Agent(agent_bin, [], tmp_path / "agent.log")  # the defaults: 512 connections, 10 s, 2 m
    holders = []
    try:
        started = time.monotonic()
        for _ in range(2):
            holders.append(subprocess.Popen([sys.executable, "-c", HOLDER, str(a.port), "10000"],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for h in holders:
            assert h.stdout.readline().strip() == "connected"
        connected = time.monotonic() - started
        for path in ["/healthz", "/metrics"]:
            t = time.monotonic()
            status, _ = a.get(path, timeout=5)
            assert status == 200, path
            assert time.monotonic() - t < 2, f"{path} took {time.monotonic() - t:.2f} s"
        scrape = a.scrape()
        assert scrape.value("slowpath_http_connections") <= 512
        assert scrape.value(CLOSED, reason="evicted") >= 20_000 - 512
        assert scrape.value(CLOSED, reason="refused") == 0
        assert "HTTP connection limit reached" in a.log_text()
        print(f"20000 connections in {connected:.1f} s; /metrics answered while they were open")
    finally:
        for h in holders:
            h.stdin.close()
            h.wait(timeout=30)
        assert a.stop() == 0


@pytest.mark.parametrize("request_bytes", [
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000 + b"\r\n\r\n",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(20_000)) + b"\r\n",
    b"GET /" + b"p" * 2_000_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
], ids=["1MB-header", "20000-headers", "2MB-path"])
def test_oversized_requests_get_431(agent, request_bytes):
    assert raw_request(agent, request_bytes).startswith("HTTP/1.1 431")
    assert agent.get("/healthz")[0] == 200


def test_unknown_path_404_and_post_405(agent):
    assert raw_request(agent, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n").startswith("HTTP/1.1 404")
    assert raw_request(agent, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").startswith(
        "HTTP/1.1 405")

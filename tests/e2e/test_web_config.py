"""--web.config.file, the Prometheus exporter-toolkit format, against the
real Prometheus: scrapes over TLS with basic auth and with a client
certificate succeed; a wrong password, no certificate, an untrusted one or
one without an allowed SAN are refused. Every file used here is also
checked, as written, by Prometheus 3's `promtool check web-config`
(Prometheus's own reader of the format), the good ones pass it and the bad
ones it rejects too. The scrapes run with Prometheus 3 and Debian's 2.42. Passwords
are hashed by `htpasswd` (the tool the toolkit's docs name), certificates
made by `openssl`. All on loopback."""

import base64
import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from helpers.agent import Agent, Scrape, error_line, run_agent
from helpers.bpf import our_program_ids, wait_unloaded
from helpers.prometheus import prom_query, prometheus_release, prometheus_server

pytestmark = pytest.mark.tier("full")

PASSWORD = "correct horse battery staple"


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class Pki:
    """A CA, certificates it signs, and a second CA nobody trusts."""

    def __init__(self, root):
        self.root = Path(root)
        self.ca("ca")
        self.ca("rogue-ca")

    def ca(self, name):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", self.root / f"{name}.key", "-out", self.root / f"{name}.crt", "-days", "2",
                "-subj", f"/CN={name}")

    def issue(self, name, san, ca="ca"):
        """`name`.crt and `name`.key for subjectAltName `san`, signed by `ca`."""
        key, csr = self.root / f"{name}.key", self.root / f"{name}.csr"
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                "-out", csr, "-subj", f"/CN={name}")
        ext = self.root / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n")
        openssl("x509", "-req", "-in", csr, "-CA", self.root / f"{ca}.crt", "-CAkey", self.root / f"{ca}.key",
                "-CAcreateserial", "-out", self.root / f"{name}.crt", "-days", "2", "-extfile", ext)
        return self.root / f"{name}.crt", key

    def context(self, client=None):
        """A client SSL context trusting our CA, with `client`'s certificate."""
        ctx = ssl.create_default_context(cafile=str(self.root / "ca.crt"))
        if client:
            ctx.load_cert_chain(self.root / f"{client}.crt", self.root / f"{client}.key")
        return ctx


def bcrypt_hash(password):
    out = subprocess.run(["htpasswd", "-nbBC", "10", "", password], check=True, capture_output=True, text=True)
    return out.stdout.strip().lstrip(":")


def promtool_check(path):
    """Prometheus 3's promtool on the file as written (Debian's 2.42 knows
    neither client_allowed_sans nor rate_limit)."""
    promtool = prometheus_release("3").promtool
    return subprocess.run([promtool, "check", "web-config", str(path)], capture_output=True, text=True)


def write_config(path, config):
    """The config as YAML (JSON is YAML), checked by promtool first."""
    path.write_text(json.dumps(config, indent=2) + "\n")
    result = promtool_check(path)
    assert result.returncode == 0, result.stdout + result.stderr
    return path


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    pki = Pki(tmp_path_factory.mktemp("pki"))
    pki.issue("server", "IP:127.0.0.1,DNS:localhost")
    pki.issue("prometheus", "DNS:prometheus.example")
    pki.issue("stranger", "DNS:stranger.example")
    pki.issue("rogue", "DNS:prometheus.example", ca="rogue-ca")
    return pki


def targets(base):
    """{job: (health, lastError)} of Prometheus's active targets."""
    with urllib.request.urlopen(f"{base}/api/v1/targets?state=active", timeout=5) as resp:
        active = json.load(resp)["data"]["activeTargets"]
    return {t["labels"]["job"]: (t["health"], t["lastError"]) for t in active}


def wait_scraped(base, jobs, timeout=30):
    """Wait until every job has been scraped at least once; their states."""
    deadline = time.monotonic() + timeout
    while True:
        state = targets(base)
        if all(state.get(j, ("unknown",))[0] != "unknown" for j in jobs):
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.5)


def job(name, port, pki, scheme="https", **extra):
    tls = {"ca_file": str(pki.root / "ca.crt")}
    tls.update(extra.pop("tls", {}))
    config = {"job_name": name, "scheme": scheme, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
    if scheme == "https":
        config["tls_config"] = tls
    config.update(extra)
    return config


def test_prometheus_scrapes_over_tls_with_basic_auth_and_refuses_the_rest(agent_bin, pki, tmp_path, release):
    server_crt, server_key = pki.root / "server.crt", pki.root / "server.key"
    web = write_config(tmp_path / "web.yml", {
        "tls_server_config": {"cert_file": str(server_crt), "key_file": str(server_key)},
        "basic_auth_users": {"prometheus": bcrypt_hash(PASSWORD)},
        "http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}},
    })
    agent = Agent(agent_bin, [f"--web.config.file={web}"], tmp_path / "agent.log",
                  ssl_context=pki.context(), auth=("prometheus", PASSWORD))
    try:
        port = agent.port
        jobs = [
            job("good", port, pki, basic_auth={"username": "prometheus", "password": PASSWORD}),
            job("wrong_password", port, pki, basic_auth={"username": "prometheus", "password": "guess"}),
            job("unknown_user", port, pki, basic_auth={"username": "root", "password": PASSWORD}),
            job("no_auth", port, pki),
            job("plain_http", port, pki, scheme="http",
                basic_auth={"username": "prometheus", "password": PASSWORD}),
        ]
        with prometheus_server(tmp_path / "prom", port, job="good", scrape_configs=jobs,
                               release=release) as base:
            state = wait_scraped(base, [j["job_name"] for j in jobs])
            assert state["good"] == ("up", ""), state
            for name in ("wrong_password", "unknown_user", "no_auth"):
                health, err = state[name]
                assert health == "down" and "401" in err, (name, state[name])
            assert state["plain_http"][0] == "down", state
            # the good job's samples are the agent's own
            assert prom_query(base, 'slowpath_build_info{job="good"}'), "no slowpath series via TLS"
            assert not prom_query(base, 'slowpath_build_info{job!="good"}')
        scrape = agent.scrape()
        assert scrape.value("slowpath_http_requests_rejected_total", reason="unauthorized") >= 3
        assert scrape.value("slowpath_http_connections_closed_total", reason="tls_handshake_error") >= 1
        assert scrape.value("slowpath_web_config_last_reload_successful") == 1
    finally:
        assert agent.stop() == 0, agent.log_text()


def test_prometheus_scrapes_with_a_client_certificate_and_refuses_the_rest(agent_bin, pki, tmp_path, release):
    web = write_config(tmp_path / "web.yml", {
        "tls_server_config": {
            "cert_file": str(pki.root / "server.crt"), "key_file": str(pki.root / "server.key"),
            "client_auth_type": "RequireAndVerifyClientCert", "client_ca_file": str(pki.root / "ca.crt"),
            "client_allowed_sans": ["prometheus.example"],
        },
    })
    agent = Agent(agent_bin, [f"--web.config.file={web}"], tmp_path / "agent.log",
                  ssl_context=pki.context(client="prometheus"))
    try:
        port = agent.port
        cert = lambda name: {"cert_file": str(pki.root / f"{name}.crt"), "key_file": str(pki.root / f"{name}.key")}
        jobs = [
            job("good", port, pki, tls=cert("prometheus")),
            job("no_certificate", port, pki),
            job("untrusted_certificate", port, pki, tls=cert("rogue")),
            job("san_not_allowed", port, pki, tls=cert("stranger")),
        ]
        with prometheus_server(tmp_path / "prom", port, job="good", scrape_configs=jobs,
                               release=release) as base:
            state = wait_scraped(base, [j["job_name"] for j in jobs])
            assert state["good"] == ("up", ""), state
            for name in ("no_certificate", "untrusted_certificate", "san_not_allowed"):
                assert state[name][0] == "down", (name, state[name])
            assert prom_query(base, 'slowpath_build_info{job="good"}')
        scrape = agent.scrape()
        assert scrape.value("slowpath_http_connections_closed_total", reason="tls_handshake_error") >= 3
    finally:
        assert agent.stop() == 0, agent.log_text()


def status_of(url, auth=None, context=None, method="GET"):
    request = urllib.request.Request(url, method=method)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as resp:
            return resp.status, resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.headers


def test_every_path_but_the_probes_needs_the_password_debug_pages_included(agent_bin, tmp_path):
    web = write_config(tmp_path / "web.yml", {
        "basic_auth_users": {"sre": bcrypt_hash(PASSWORD)},
        "http_server_config": {"headers": {"X-Frame-Options": "deny", "Content-Security-Policy": "default-src 'none'"}},
    })
    agent = Agent(agent_bin, [f"--web.config.file={web}", "--debug.callsites"], tmp_path / "agent.log",
                  auth=("sre", PASSWORD))
    try:
        for path in ("/metrics", "/debug/callsites", "/debug/findings", "/", "/no-such-page"):
            status, headers = status_of(agent.url + path)
            assert status == 401, path
            assert headers.get("WWW-Authenticate") == "Basic", headers
            assert headers.get("X-Frame-Options") == "deny", headers
            assert status_of(agent.url + path, auth=("sre", "wrong"))[0] == 401, path
        for path, expected in (("/metrics", 200), ("/debug/callsites", 200), ("/debug/findings", 200), ("/", 200),
                               ("/no-such-page", 404)):
            status, headers = status_of(agent.url + path, auth=("sre", PASSWORD))
            assert status == expected, path
            assert headers.get("Content-Security-Policy") == "default-src 'none'", headers
        assert status_of(agent.url + "/metrics", auth=("sre", PASSWORD), method="POST")[0] == 405
        for path in ("/healthz", "/readyz"):
            assert status_of(agent.url + path)[0] == 200, path
    finally:
        assert agent.stop() == 0, agent.log_text()


def test_a_changed_file_is_read_again_and_a_broken_one_keeps_the_last_good(agent_bin, pki, tmp_path):
    for name in ("server", "server-new"):
        pki.issue(name, "IP:127.0.0.1")
    shutil.copy(pki.root / "server.crt", tmp_path / "tls.crt")
    shutil.copy(pki.root / "server.key", tmp_path / "tls.key")
    config = {
        "tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"},  # relative to the file
        "basic_auth_users": {"sre": bcrypt_hash(PASSWORD)},
    }
    web = write_config(tmp_path / "web.yml", config)
    agent = Agent(agent_bin, [f"--web.config.file={web}"], tmp_path / "agent.log",
                  ssl_context=pki.context(), auth=("sre", PASSWORD))

    def served_cert():
        with pki.context().wrap_socket(socket.create_connection(("127.0.0.1", agent.port)),
                                       server_hostname="127.0.0.1") as s:
            return s.getpeercert(binary_form=True)

    def der(name):
        out = subprocess.run(["openssl", "x509", "-in", pki.root / f"{name}.crt", "-outform", "DER"],
                             capture_output=True, check=True).stdout
        return out

    try:
        assert served_cert() == der("server")
        # rotate the certificate (cert-manager style): the next connection has it
        shutil.copy(pki.root / "server-new.crt", tmp_path / "tls.crt")
        shutil.copy(pki.root / "server-new.key", tmp_path / "tls.key")
        assert served_cert() == der("server-new")
        # a new password works from the next request, the old one no longer
        config["basic_auth_users"]["sre"] = bcrypt_hash("new password")
        write_config(web, config)
        assert status_of(agent.url + "/metrics", auth=("sre", PASSWORD), context=pki.context())[0] == 401
        assert status_of(agent.url + "/metrics", auth=("sre", "new password"), context=pki.context())[0] == 200
        agent.auth = ("sre", "new password")
        # a broken file: promtool rejects it; the agent keeps the last good settings and says so
        web.write_text("tls_server_config: [\n")
        assert promtool_check(web).returncode != 0
        for _ in range(5):
            assert served_cert() == der("server-new")
        scrape = agent.scrape()
        assert scrape.value("slowpath_web_config_last_reload_successful") == 0
        assert agent.log_text().count("web config invalid") == 1, agent.log_text()
        write_config(web, config)
        assert agent.scrape().value("slowpath_web_config_last_reload_successful") == 1
    finally:
        assert agent.stop() == 0, agent.log_text()


def test_rate_limit_answers_429_beyond_the_burst(agent_bin, tmp_path):
    web = write_config(tmp_path / "web.yml", {"rate_limit": {"interval": "1s", "burst": 5}})
    agent = Agent(agent_bin, [f"--web.config.file={web}"], tmp_path / "agent.log")
    try:
        time.sleep(5.5)  # the bucket refills after wait_ready's requests
        statuses = [status_of(agent.url + "/healthz")[0] for _ in range(10)]
        assert statuses[:5] == [200] * 5 and statuses[5:] == [429] * 5, statuses
        time.sleep(1.1)
        text = agent.get("/metrics")[1]
        assert Scrape(text).value("slowpath_http_requests_rejected_total", reason="rate_limited") >= 5
    finally:
        assert agent.stop() == 0, agent.log_text()


BAD_FILES = {
    "missing": None,
    "unknown_key": {"tls_srever_config": {}},
    "plain_password": {"basic_auth_users": {"sre": "hunter2"}},
    "key_without_cert": {"tls_server_config": {"key_file": "server.key"}},
    "mismatched_key": {"tls_server_config": {"cert_file": "server.crt", "key_file": "prometheus.key"}},
    "ca_without_policy": {"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key",
                                                "client_ca_file": "ca.crt"}},
    "bad_header": {"http_server_config": {"headers": {"X-Frame-Options": "allow-from"}}},
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_file_is_one_line_exit_1_and_nothing_attached(agent_bin, pki, case):
    path = pki.root / f"bad-{case}.yml"
    if BAD_FILES[case] is not None:
        path.write_text(json.dumps(BAD_FILES[case]) + "\n")
    # Prometheus's own reader rejects it too
    assert promtool_check(path).returncode != 0
    before = our_program_ids()
    result = run_agent(agent_bin, f"--web.config.file={path}")
    assert result.returncode == 1, result.stderr
    line = error_line(result)
    assert line.startswith(f"slowpath: error: bad --web.config.file {path}:"), line
    assert len([l for l in result.stderr.splitlines() if l.strip()]) == 1, result.stderr
    assert wait_unloaded(our_program_ids() - before)

"""The agent under test: a running slowpath (`Agent`) and its parsed /metrics
(`Scrape`), one run to its exit (`run_agent`, `error_line`) and the doctor's
JSON report (`doctor_report`), or the doctor started once it observes
(`start_doctor`)."""

import base64
import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from helpers.host import free_port


class Scrape:
    """One parsed /metrics page."""

    def __init__(self, text):
        self.text = text
        self.samples = [
            s for fam in text_string_to_metric_families(text) for s in fam.samples
        ]

    def select(self, name, **labels):
        want = {k: str(v) for k, v in labels.items()}
        return [
            s
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in want.items())
        ]

    def value(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels` (0 if none)."""
        return sum(s.value for s in self.select(name, **labels))


class Agent:
    """A running slowpath process. With `ssl_context` it is reached over
    https (the context holds the CA and any client certificate), with `auth`
    (user, password) every request carries basic auth."""

    ssl_context = None
    auth = None

    def __init__(self, binary, args, log_path, prefix=(), ssl_context=None, auth=None):
        self.port = free_port()
        self.ssl_context = ssl_context
        self.auth = auth
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [*prefix, str(binary), f"--web.listen-address=127.0.0.1:{self.port}", *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.wait_ready()

    def get(self, path, timeout=10):
        request = urllib.request.Request(self.url + path)
        if self.auth:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context) as resp:
            return resp.status, resp.read().decode()

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited {self.proc.returncode}: {self.log_text()}")
            try:
                status, _ = self.get("/readyz", timeout=1)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"agent not ready after {timeout}s: {self.log_text()}")

    def scrape(self):
        status, text = self.get("/metrics")
        assert status == 200
        return Scrape(text)

    def log_text(self):
        # stop() closes the log: its failure message must still show it
        if not self.log.closed:
            self.log.flush()
        return Path(self.log_path).read_text(errors="replace")

    def stop(self, timeout=20):
        """SIGTERM, then the exit code; SIGKILL (-9) after `timeout` s. The
        agent closes its connections and detaches every program first, which
        a loaded host slows to seconds (CI once passed 5 s): a hang still
        shows as -9."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def run_agent(agent_bin, *args, prefix=(), timeout=20):
    """Run the agent to its exit (for flags that must stop it)."""
    port = free_port()
    return subprocess.run(
        [*prefix, str(agent_bin), f"--web.listen-address=127.0.0.1:{port}", *args],
        capture_output=True, text=True, timeout=timeout,
    )


def error_line(result):
    """The last line on stderr, checked to exist."""
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert lines, "no message on stderr"
    return lines[-1]


def start_doctor(agent_bin, log_path, *args, timeout=30):
    """`slowpath doctor --format=json` with `args` (stdout piped, the debug
    log in `log_path`), returned once it logs "observing": its first
    snapshot is taken, so every event from then on is in the report, however
    long loading took on a busy host."""
    with open(log_path, "w") as err:
        doc = subprocess.Popen([str(agent_bin), "doctor", "--format=json", "--log.level=debug", *args],
                               stdout=subprocess.PIPE, stderr=err, text=True)
    deadline = time.monotonic() + timeout
    while " observing" not in log_path.read_text():
        if doc.poll() is not None or time.monotonic() > deadline:
            doc.kill()
            out, _ = doc.communicate()
            raise AssertionError(f"doctor not observing within {timeout} s (exit {doc.returncode}): "
                                 f"{log_path.read_text()}{out}")
        time.sleep(0.05)
    return doc


def doctor_report(agent_bin, *args, duration="2s"):
    """`slowpath doctor --format=json` with `args`: the parsed report; the
    doctor must exit 0."""
    out = subprocess.run([str(agent_bin), "doctor", f"--duration={duration}", "--format=json", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)

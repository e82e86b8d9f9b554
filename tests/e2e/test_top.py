"""`slowpath top --batch` against a running agent: its frames' rates, times
the interval they are over and summed over the frames, give every call a
workload made between the first read and the last, as strace counts them;
text frames as `top -b` prints them; over TLS with basic auth as the
agent's --web.config.file asks; and one line with exit 1 when no agent
answers or the password is missing."""

import json
import subprocess
import time

from conftest import Agent, run_workload
from test_web_config import PASSWORD, Pki, bcrypt_hash, write_config


def top(agent_bin, agent, *args, timeout=60):
    return subprocess.run([str(agent_bin), "top", "--batch", f"--agent.url={agent.url}/metrics", *args],
                          capture_output=True, text=True, timeout=timeout)


def increases(frames, pid, column):
    """A column's increase for one process over every frame: rate x interval."""
    return sum(r["rates"].get(column, 0) * r["interval_seconds"] for r in frames if r.get("pid") == str(pid))


def test_rates_over_the_frames_add_up_to_the_calls_strace_counts(agent_bin, workload_bin, tmp_path):
    agent = Agent(agent_bin, ["--metrics.pid-label"], tmp_path / "agent.log")
    try:
        view = subprocess.Popen([str(agent_bin), "top", "--batch", "--json", "-n", "4", "-d", "2",
                                 f"--agent.url={agent.url}/metrics"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # after the first read; strace's stops make each call ~20 us: done well before 8 s
        clock_pid, clock = run_workload(workload_bin, "clock-raw", 20000, strace=tmp_path / "clock.strace")
        ctx_pid, ctx = run_workload(workload_bin, "context", 2000, strace=tmp_path / "ctx.strace")
        out, err = view.communicate(timeout=60)
    finally:
        assert agent.stop() == 0, agent.log_text()
    assert view.returncode == 0, err
    frames = [json.loads(line) for line in out.splitlines()]
    assert {r["comm"] for r in frames if r.get("pid") in (str(clock_pid), str(ctx_pid))} == {"sp-workload"}
    assert round(increases(frames, clock_pid, "clock_fallbacks")) == clock["clock_gettime"] == 20000
    assert round(increases(frames, ctx_pid, "sigprocmask")) == ctx["rt_sigprocmask"] >= 4000


def test_text_frames_put_the_busiest_process_first(agent_bin, workload_bin, tmp_path):
    agent = Agent(agent_bin, [], tmp_path / "agent.log")
    try:
        load = subprocess.Popen([str(workload_bin), "clock-raw", "100000000"], stdout=subprocess.DEVNULL)
        try:
            result = top(agent_bin, agent, "-n", "2", "-d", "1")
        finally:
            load.kill()
            load.wait()
    finally:
        assert agent.stop() == 0, agent.log_text()
    assert result.returncode == 0, result.stderr
    frames = result.stdout.rstrip("\n").split("\n\n")
    assert len(frames) == 2, result.stdout
    for frame in frames:
        title, columns, first = frame.splitlines()[:3]
        assert title.startswith("slowpath top - ") and "rates over" in title, frame
        assert columns.split()[:4] == ["PID", "COMM", "CLOCK/s", "SIGMASK/s"], frame
        assert first.split()[1] == "sp-workload", frame


def test_over_tls_with_basic_auth_and_one_line_without_the_password(agent_bin, tmp_path):
    pki = Pki(tmp_path)
    crt, key = pki.issue("server", "IP:127.0.0.1,DNS:localhost")
    web = write_config(tmp_path / "web.yml", {
        "tls_server_config": {"cert_file": str(crt), "key_file": str(key)},
        "basic_auth_users": {"sre": bcrypt_hash(PASSWORD)},
    })
    password = tmp_path / "password"
    password.write_text(PASSWORD + "\n")
    agent = Agent(agent_bin, [f"--web.config.file={web}"], tmp_path / "agent.log",
                  ssl_context=pki.context(), auth=("sre", PASSWORD))
    try:
        ca = f"--agent.ca-file={pki.root / 'ca.crt'}"
        good = top(agent_bin, agent, "-n", "1", "-d", "0.5", ca, "--agent.username=sre",
                   f"--agent.password-file={password}")
        no_password = top(agent_bin, agent, "-n", "1", "-d", "0.5", ca)
        untrusted = top(agent_bin, agent, "-n", "1", "-d", "0.5", "--agent.username=sre",
                        f"--agent.password-file={password}")
    finally:
        assert agent.stop() == 0, agent.log_text()
    assert good.returncode == 0, good.stderr
    assert good.stdout.startswith("slowpath top - "), good.stdout
    assert no_password.returncode == 1
    assert no_password.stderr.strip().splitlines() == [
        f"slowpath: error: the agent at {agent.url}/metrics asks for basic auth: give --agent.username and "
        "--agent.password-file (or they are wrong)"], no_password.stderr
    assert untrusted.returncode == 1 and f"no agent answers at {agent.url}/metrics" in untrusted.stderr


def test_no_agent_is_one_line_and_exit_1(agent_bin):
    result = subprocess.run([str(agent_bin), "top", "-b", "-n", "1", "--agent.url=http://127.0.0.1:9/metrics"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("slowpath: error: no agent answers at http://127.0.0.1:9/metrics"), line

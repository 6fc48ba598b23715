"""The monitoring stack end to end, no GPU: `peregrine serve` on the embedded demo model with
/metrics on its own port, a real Prometheus scraping it every second, `peregrine bench` as
the load, then every panel query of deploy/grafana/peregrine.json evaluated through
Prometheus's HTTP API must return data (and finite numbers). Also checks
deploy/prometheus/prometheus.yml with promtool."""
import json
import math
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("PEREGRINE_BIN", os.path.join(ROOT, "build", "peregrine"))
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "peregrine.json")
PROMETHEUS_YML = os.path.join(ROOT, "deploy", "prometheus", "prometheus.yml")
API_KEY = "deploy-secret-key"
MODEL = "deepseek-v4-demo"
# What Grafana puts in for its built-in variables (a 1 s scrape, a short dashboard range).
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_for(url, proc, log, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited early:\n{open(log.name).read()}")
        try:
            if get(url, timeout=1)[0] == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up:\n{open(log.name).read()}")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Process:
    def __init__(self, args, name):
        self.log = tempfile.NamedTemporaryFile(mode="w+", prefix=f"peregrine-{name}-", suffix=".log")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus not found (tools/setup.sh installs Debian's prometheus package)")
    tmp = tmp_path_factory.mktemp("monitoring")
    api_port, metrics_port, prom_port = free_port(), free_port(), free_port()
    server = Process([BIN, "serve", "--host", "127.0.0.1", "--port", str(api_port), "--metrics-port",
                      str(metrics_port), "--api-key", API_KEY, "--served-model-name", MODEL,
                      "--disable-log-requests"], "serve")
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: peregrine\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{metrics_port}']\n")
    prom = Process([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}"], "prometheus")
    try:
        wait_for(f"http://127.0.0.1:{metrics_port}/health", server.proc, server.log)
        wait_for(f"http://127.0.0.1:{prom_port}/-/ready", prom.proc, prom.log)
        yield {"api": f"http://127.0.0.1:{api_port}", "metrics": f"http://127.0.0.1:{metrics_port}",
               "prometheus": f"http://127.0.0.1:{prom_port}", "server": server}
    finally:
        stop(server.proc)
        stop(prom.proc)


def query(stack, expr):
    url = stack["prometheus"] + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, body = get(url)
    reply = json.loads(body)
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def panel_targets():
    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["refId"], target["expr"]


def substitute(expr):
    expr = expr.replace("${metrics_prefix}", "peregrine").replace("$model_name", MODEL)
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def test_prometheus_yml_is_valid():
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found (Debian's prometheus package has it)")
    r = subprocess.run([promtool, "check", "config", PROMETHEUS_YML], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_metrics_port_is_public_and_the_api_port_keeps_its_key(stack):
    status, body = get(stack["metrics"] + "/metrics")
    assert status == 200 and "peregrine:num_requests_running" in body
    with pytest.raises(urllib.error.HTTPError) as e:
        get(stack["api"] + "/v1/models")
    assert e.value.code == 401


def wait_for_scrapes(stack, n, seconds=30):
    """Until Prometheus holds `n` scrapes of the server: counters must have a sample from before
    the load, or their increase (and every rate() of a panel) would be lost."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        result = query(stack, 'count_over_time(up{job="peregrine"}[5m])')
        if result and float(result[0]["value"][1]) >= n:
            return
        time.sleep(0.25)
    pytest.fail(f"Prometheus did not scrape the server {n} times in {seconds} s")


def test_every_dashboard_panel_has_data_under_load(stack):
    wait_for_scrapes(stack, 2)
    bench = subprocess.run(
        [BIN, "bench", "--base-url", stack["api"], "--api-key", API_KEY, "--endpoint", "/v1/completions",
         "--num-prompts", "24", "--input-len", "48", "--prefix-len", "32", "--output-len", "12",
         "--concurrency", "4", "--warmup", "0"],
        capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    # Two more scrapes after the load, so every counter has moved inside the window.
    time.sleep(3)
    up = query(stack, 'up{job="peregrine"}')
    assert up and up[0]["value"][1] == "1", up
    models = get(stack["prometheus"] + "/api/v1/label/model_name/values?" +
                 urllib.parse.urlencode({"match[]": "peregrine:num_requests_running"}))[1]
    assert MODEL in json.loads(models)["data"]  # the dashboard's model_name variable
    failures = []
    targets = list(panel_targets())
    assert len(targets) >= 20
    for title, ref, expr in targets:
        result = query(stack, substitute(expr))
        if not result:
            failures.append(f"{title} [{ref}]: no data: {expr}")
            continue
        for series in result:
            value = float(series["value"][1])
            if not math.isfinite(value):
                failures.append(f"{title} [{ref}]: {value} for {series['metric']}: {expr}")
    assert not failures, "\n".join(failures)

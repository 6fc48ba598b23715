"""`peregrine serve` as a vLLM or SGLang launch script calls it: their flag spellings, refusals
that name what is supported, a busy port found before anything loads, and the log lines
(one per request, a periodic stats line)."""
import re
import socket
import subprocess
import time
import urllib.request

import openai
import pytest

from conftest import API_KEY, BIN, Server, free_port


def run_serve(*args, timeout=60):
    return subprocess.run([BIN, "serve", *args], capture_output=True, text=True, timeout=timeout)


def test_vllm_style_launch_serves_and_logs_requests_and_stats():
    s = Server(["demo", "--served-model-name", "dsv4", "--tensor-parallel-size", "1", "--dtype", "auto",
                "--kv-cache-dtype", "auto", "--trust-remote-code", "--enable-chunked-prefill",
                "--reasoning-parser", "deepseek_v4", "--tool-call-parser", "deepseek_v4",
                "--max-model-len", "4096", "--log-level", "INFO", "--log-stats-interval", "0.2"])
    try:
        client = openai.OpenAI(base_url=s.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
        assert [m.id for m in client.models.list().data] == ["dsv4"]
        r = client.completions.with_raw_response.create(model="dsv4", prompt="Hello", max_tokens=8,
                                                        temperature=0)
        request_id = r.headers["x-request-id"]
        completion = r.parse()
        deadline = time.time() + 10
        while time.time() < deadline and "stats:" not in s.log_text():
            time.sleep(0.1)
        log = s.log_text()
        line = next(l for l in log.splitlines() if f"request {request_id}:" in l)
        assert "status 200 (length)" in line, line
        assert f"prompt {completion.usage.prompt_tokens} tokens" in line, line
        assert f"completion {completion.usage.completion_tokens} tokens" in line, line
        assert re.search(r"stats: \d+ running, \d+ waiting; prompt [0-9.]+ tok/s, generation [0-9.]+ tok/s", log), log
        assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} info +serving dsv4 on http://", log, re.M), log
    finally:
        s.stop()


def test_sglang_style_launch_and_quiet_logs():
    s = Server(["--model-path", "demo", "--tp-size", "1", "--context-length", "2048",
                "--max-running-requests", "8", "--chunked-prefill-size", "512", "--disable-radix-cache",
                "--disable-log-requests", "--disable-log-stats", "--log-level", "warning"])
    try:
        client = openai.OpenAI(base_url=s.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
        model = client.models.list().data[0].id
        prompt = "the same long prompt " * 150  # several 256-token blocks
        for _ in range(2):  # --disable-radix-cache: the repeat finds nothing cached
            r = client.completions.create(model=model, prompt=prompt, max_tokens=4)
            assert r.usage.prompt_tokens > 512
            assert r.usage.prompt_tokens_details.cached_tokens == 0
        with pytest.raises(openai.BadRequestError):  # 2048-token context
            client.completions.create(model=model, prompt="Hi", max_tokens=4096)
        log = s.log_text()
        assert "request " not in log and "stats:" not in log and " info " not in log, log
    finally:
        s.stop()


@pytest.mark.parametrize("args,needle", [
    (["--tensor-parallel-size", "3"], "num_attention_heads"),  # the demo's 8 heads do not split 3 ways
    (["--tp", "65"], "not in range 1 to 64"),
    (["--quantization", "awq"], "--quantization"),
    (["--kv-cache-dtype", "fp16"], "--kv-cache-dtype"),
    (["--chat-template", "template.jinja"], "chat encoding is built in"),
    (["--reasoning-parser", "qwen3"], "--reasoning-parser"),
    (["--tool-call-parser", "hermes"], "--tool-call-parser"),
    (["--log-level", "loud"], "--log-level"),
    (["--disable-log-requests", "--enable-log-requests"], "excludes"),
])
def test_unsupported_choices_are_refused_with_the_supported_ones(args, needle):
    r = run_serve(*args)
    assert r.returncode != 0
    assert needle.lower() in (r.stdout + r.stderr).lower(), r.stderr


def test_fp8_kv_cache_serves_on_the_cpu_and_reports_its_dtype():
    s = Server(["demo", "--kv-cache-dtype", "fp8"])
    try:
        client = openai.OpenAI(base_url=s.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
        model = client.models.list().data[0].id
        r = client.completions.create(model=model, prompt="Hello", max_tokens=8, temperature=0,
                                      extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 8
        req = urllib.request.Request(s.base_url + "/metrics", headers={"Authorization": "Bearer " + API_KEY})
        with urllib.request.urlopen(req) as m:
            metrics = m.read().decode()
        assert 'cache_dtype="fp8"' in metrics, [l for l in metrics.splitlines() if "cache_config_info" in l]
    finally:
        s.stop()


def test_busy_port_fails_before_loading():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        start = time.time()
        r = run_serve("--host", "127.0.0.1", "--port", str(port), timeout=30)
        assert r.returncode == 1
        assert f"cannot listen on 127.0.0.1:{port}" in r.stderr, r.stderr
        assert time.time() - start < 10


def test_host_that_is_not_an_address_is_refused():
    r = run_serve("--host", "not-an-address", "--port", "0")
    assert r.returncode == 1
    assert "is not an IP address" in r.stderr, r.stderr


def test_localhost_is_a_host():
    port = free_port()
    p = subprocess.Popen([BIN, "serve", "--host", "localhost", "--port", str(port), "--api-key", API_KEY],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail("serve --host localhost did not listen")
    finally:
        p.terminate()
        p.wait(timeout=30)

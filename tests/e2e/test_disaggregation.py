"""Prefill/decode disaggregation on the CPU backend: a prefill server, a decode server and
`peregrine router --pd-disaggregation` in front, through the official openai client. The text
is the single server's (streamed and not, completions and chat) and the KV really moved (UCX
over loopback); every fault ends in a recompute or an error as the decode server's failure
policy says (prefill server dead, transfer corrupted, lost, or refused for a wrong secret),
never in wrong text; a decode server killed mid-stream gives an error event; clients that go
away leave no request running on either side; the transfer port survives garbage."""
import contextlib
import http.client
import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from conftest import API_KEY, Router, Server, free_port

SECRET = "e2e-disaggregation-secret-0123456789"


def _client(url):
    import openai
    return openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def _metric(server, name, outcome=None, label=None):
    """The sum of the server's `peregrine:<name>` series (those with that outcome, or label)."""
    label = label or (f'outcome="{outcome}"' if outcome else None)
    req = urllib.request.Request(server.base_url + "/metrics", headers={"Authorization": "Bearer " + API_KEY})
    with urllib.request.urlopen(req) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        if series.split("{")[0] == "peregrine:" + name and (label is None or label in series):
            total += float(value)
    return total


def _prefill(port, env=None, extra=()):
    return Server(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(port), *extra],
                  env={"PEREGRINE_DISAGGREGATION_SECRET": SECRET, **(env or {})})


def _decode(extra=(), secret=SECRET):
    return Server(["--disaggregation-mode", "decode", "--disaggregation-transfer-timeout-secs", "3", *extra],
                  env={"PEREGRINE_DISAGGREGATION_SECRET": secret})


def _pd_router(prefill, bootstrap_port, decode):
    return Router([], ["--max-retries", "0"],
                  worker_args=["--pd-disaggregation", "--prefill", prefill.base_url, str(bootstrap_port),
                               "--decode", decode.base_url])


@contextlib.contextmanager
def _pd_trio(prefill_env=None, prefill_args=(), decode_args=(), secret=SECRET):
    """A prefill server, a decode server and the router pairing them; all stopped after."""
    port = free_port()
    prefill = _prefill(port, prefill_env, prefill_args)
    decode = router = None
    try:
        decode = _decode(decode_args, secret)
        router = _pd_router(prefill, port, decode)
        yield prefill, decode, router, port
    finally:
        for s in (router, decode, prefill):
            if s is not None:
                s.stop()


PROMPTS = ["The river", "Once upon a time", "import numpy as np\n"]


def _texts(client, prompts=PROMPTS):
    model = client.models.list().data[0].id
    out = []
    for prompt in prompts:
        kw = dict(model=model, prompt=prompt, max_tokens=20, temperature=0)
        out.append(client.completions.create(**kw).choices[0].text)
        out.append("".join(c.choices[0].text for c in client.completions.create(stream=True, **kw) if c.choices))
    messages = [{"role": "user", "content": "Say hello"}]
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0)
    out.append(chat.choices[0].message.content)
    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=16, temperature=0,
                                            stream=True)
    out.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
    return out


@pytest.fixture(scope="module")
def reference():
    s = Server()
    try:
        yield _texts(_client(s.base_url))
    finally:
        s.stop()


@pytest.fixture(scope="module")
def pd():
    with _pd_trio() as trio:
        yield trio


def test_pd_pair_answers_as_one_server(reference, pd):
    prefill, decode, router, _ = pd
    assert _texts(_client(router.base_url)) == reference
    # The KV moved: every generation request was pulled, none recomputed.
    assert _metric(prefill, "kv_transfer_rooms_published_total") >= 8
    assert _metric(decode, "kv_transfer_pulls_total", "ok") >= 8
    assert _metric(decode, "kv_transfer_pulls_total", "failed") == 0
    assert _metric(decode, "kv_transfer_recomputed_total") == 0
    assert _metric(decode, "kv_transfer_bytes_total") > 0
    # The prefill server's prefix-cache hits reach the client's usage through the decode server.
    client = _client(router.base_url)
    long_prompt = "The mountains and the rivers of the north. " * 80
    client.completions.create(model="deepseek-v4", prompt=long_prompt, max_tokens=2, temperature=0)
    again = client.completions.create(model="deepseek-v4", prompt=long_prompt, max_tokens=2, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens >= 256


def test_bootstrap_fields_are_checked(pd):
    prefill, decode, _, port = pd
    body = {"model": "deepseek-v4", "prompt": "hi", "max_tokens": 4, "bootstrap_host": "127.0.0.1", "bootstrap_port": port,
            "bootstrap_room": 12345, "n": 2}
    for target, patch, want in [(decode, {}, "n"), (decode, {"bootstrap_port": None}, "bootstrap_room"),
                                (decode, {"bootstrap_port": 70000}, "bootstrap_port"),
                                (decode, {"n": 1, "prompt_logprobs": 1}, "prompt_logprobs")]:
        b = {k: v for k, v in {**body, **patch}.items() if v is not None}
        req = urllib.request.Request(target.base_url + "/v1/completions", data=json.dumps(b).encode(),
                                     headers={"Authorization": "Bearer " + API_KEY,
                                              "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req)
        assert e.value.code == 400
        assert json.loads(e.value.read())["error"]["param"] == want


def test_a_server_without_a_mode_refuses_rooms(pd):
    plain = Server()
    try:
        b = {"model": "deepseek-v4", "prompt": "hi", "max_tokens": 4, "bootstrap_host": "127.0.0.1", "bootstrap_port": 1,
             "bootstrap_room": 1}
        req = urllib.request.Request(plain.base_url + "/v1/completions", data=json.dumps(b).encode(),
                                     headers={"Authorization": "Bearer " + API_KEY,
                                              "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req)
        assert e.value.code == 400
    finally:
        plain.stop()


def test_clients_that_leave_free_both_sides(pd):
    prefill, decode, router, _ = pd
    body = {"model": "deepseek-v4", "prompt": "Tell me a long story", "max_tokens": 400, "temperature": 0,
            "stream": True, "ignore_eos": True}
    conn = http.client.HTTPConnection("127.0.0.1", router.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Authorization": "Bearer " + API_KEY, "Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200
    while not r.readline().startswith(b"data: {"):
        pass  # until the first token is here; then go away
    deadline = time.time() + 5  # the engine's gauges follow within a step
    while _metric(decode, "num_requests_running") != 1 and time.time() < deadline:
        time.sleep(0.02)
    assert _metric(decode, "num_requests_running") == 1
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    deadline = time.time() + 10
    while time.time() < deadline:
        running = [_metric(s, "num_requests_running") + _metric(s, "num_requests_waiting") for s in (prefill, decode)]
        usage = [_metric(s, "kv_cache_usage_perc") for s in (prefill, decode)]
        if running == [0, 0] and usage == [0, 0]:
            break
        time.sleep(0.1)
    assert running == [0, 0] and usage == [0, 0], (running, usage)


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_during_the_prefill_aborts_it(stream):
    # A slow prefill (32-token chunks of a long prompt), left by its client after 0.3 s: the
    # router closes both upstream connections and the prefill server aborts the request
    # instead of computing the rest of the prompt.
    with _pd_trio(prefill_args=["--max-num-batched-tokens", "32"]) as (prefill, decode, router, _):
        body = json.dumps({"model": "deepseek-v4", "prompt": "a long story about rivers " * 800, "max_tokens": 8,
                           "stream": stream})
        with socket.create_connection(("127.0.0.1", router.port)) as sock:
            sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
                          f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
            time.sleep(0.3)
        deadline = time.time() + 10
        while time.time() < deadline and _metric(prefill, "request_success_total") == 0:
            time.sleep(0.05)
        # The prompt was not computed to the end: the request ended as an abort.
        assert _metric(prefill, "request_success_total") == 1
        assert _metric(prefill, "request_success_total", label='finished_reason="abort"') == 1
        assert _metric(prefill, "kv_transfer_rooms_published_total") == 0
        deadline = time.time() + 5
        while time.time() < deadline and _metric(decode, "num_requests_running") + _metric(decode, "num_requests_waiting"):
            time.sleep(0.05)
        assert _metric(decode, "num_requests_running") + _metric(decode, "num_requests_waiting") == 0


def test_the_transfer_port_survives_garbage(reference, pd):
    _, _, router, port = pd
    for junk in [b"\x00", b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 64]:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(junk)
            time.sleep(0.05)
    assert _texts(_client(router.base_url), PROMPTS[:1])[:2] == reference[:2]


@pytest.mark.parametrize("fault", ["prefill_dead", "corrupt", "drop", "wrong_secret"])
@pytest.mark.parametrize("policy", ["recompute", "fail"])
def test_transfer_faults_follow_the_failure_policy(reference, fault, policy):
    env = {"PEREGRINE_KV_TRANSFER_FAULT": fault} if fault in ("corrupt", "drop") else None
    with _pd_trio(env, decode_args=["--disaggregation-failure-policy", policy],
                  secret=SECRET + "-other" if fault == "wrong_secret" else SECRET) as (prefill, decode, router, port):
        client = _client(router.base_url)
        model = client.models.list().data[0].id
        kw = dict(model=model, prompt=PROMPTS[0], max_tokens=20, temperature=0)
        if fault == "prefill_dead":
            # As the router pairs it, but the prefill server is gone before the transfer.
            prefill.stop()
            client = _client(decode.base_url)
            kw["extra_body"] = {"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": 77}
        if policy == "recompute":
            assert client.completions.create(**kw).choices[0].text == reference[0]
            assert _metric(decode, "kv_transfer_recomputed_total") >= 1
        else:
            import openai
            with pytest.raises(openai.InternalServerError):
                client.completions.create(**kw)
        assert _metric(decode, "kv_transfer_pulls_total", "failed") >= 1
        assert _metric(decode, "kv_transfer_pulls_total", "ok") == 0


def test_a_speculating_decode_server_answers_the_same(reference):
    with _pd_trio(decode_args=["--speculative-algorithm", "mtp", "--speculative-num-steps", "3"]) as (_, decode, router, _):
        assert _texts(_client(router.base_url)) == reference
        assert _metric(decode, "kv_transfer_recomputed_total") == 0
        assert _metric(decode, "spec_decode_num_accepted_tokens_total") > 0


def test_without_a_prefill_server_the_router_sends_whole_requests_to_decode(reference):
    with _pd_trio() as (prefill, decode, router, _):
        prefill.stop()
        time.sleep(1.5)  # the health checks eject it
        client = _client(router.base_url)
        model = client.models.list().data[0].id
        assert client.completions.create(model=model, prompt=PROMPTS[0], max_tokens=20,
                                         temperature=0).choices[0].text == reference[0]
        assert _metric(decode, "kv_transfer_pulls_total") == 0


def test_a_decode_server_killed_mid_stream_ends_in_an_error_event():
    with _pd_trio() as (prefill, decode, router, _):
        client = _client(router.base_url)
        model = client.models.list().data[0].id
        stream = client.completions.create(model=model, prompt="Tell me a long story", max_tokens=2000,
                                           temperature=0, stream=True, extra_body={"ignore_eos": True})
        got_error = False
        import openai
        try:
            for i, chunk in enumerate(stream):
                if i == 3:
                    decode.proc.kill()
        except openai.APIError:
            got_error = True
        assert got_error


def test_a_mode_without_a_secret_does_not_start():
    with pytest.raises(RuntimeError, match="secret"):
        Server(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(free_port())])


def test_a_cpu_prefill_server_refuses_cuda_ipc():
    # The pages of a cuda_ipc prefill server stay on its GPU: without one it does not start.
    with pytest.raises(RuntimeError, match="cuda_ipc"):
        Server(["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(free_port()),
                "--disaggregation-transfer-backend", "cuda_ipc"], env={"PEREGRINE_DISAGGREGATION_SECRET": "0123456789abcdef"})

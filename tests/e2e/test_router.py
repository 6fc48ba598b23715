"""`peregrine router` over two real `peregrine serve` workers, through the official openai
client: the text is the single server's (streamed and not, completions and chat), the
cache-aware policy keeps a prompt on one worker, a killed worker is retried around and
ejected, a stream whose worker dies ends with an error event, and with no worker left the
router answers 503 in OpenAI's error shape."""
import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from conftest import API_KEY, Router, Server


def _client(url):
    import openai
    return openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def workers():
    ws = [Server(), Server()]
    yield ws
    for w in ws:
        w.stop()


def _texts(client):
    model = client.models.list().data[0].id
    out = []
    for prompt in ["The river", "Once upon a time", "import numpy as np\n"]:
        kw = dict(model=model, prompt=prompt, max_tokens=24, temperature=0)
        out.append(client.completions.create(**kw).choices[0].text)
        out.append("".join(c.choices[0].text for c in client.completions.create(stream=True, **kw) if c.choices))
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello"}],
                                          max_tokens=16, temperature=0)
    out.append(chat.choices[0].message.content)
    return out


@pytest.mark.parametrize("policy", ["round_robin", "least_load", "cache_aware"])
def test_router_answers_as_one_server(workers, policy):
    router = Router(workers, ["--policy", policy])
    try:
        assert _texts(_client(router.base_url)) == _texts(_client(workers[0].base_url))
        m = router.metrics()
        served = {k: v for k, v in m.items() if k.startswith("peregrine:router_requests_total") and 'code="200"' in k}
        assert sum(served.values()) >= 7
        if policy == "round_robin":
            assert len(served) == 2, served  # both workers took requests
    finally:
        router.stop()


def test_cache_aware_keeps_a_prompt_on_its_worker(workers):
    router = Router(workers, ["--policy", "cache_aware"])
    try:
        client = _client(router.base_url)
        model = client.models.list().data[0].id
        shared = "A long shared system prompt about rivers and mountains. " * 8
        for i in range(6):
            client.completions.create(model=model, prompt=shared + str(i), max_tokens=2, temperature=0)
        served = [v for k, v in router.metrics().items()
                  if k.startswith("peregrine:router_requests_total") and 'code="200"' in k]
        assert max(served) >= 6, served  # the six completions (and maybe /v1/models) on one worker
    finally:
        router.stop()


def test_api_key_and_unknown_routes(workers):
    router = Router(workers)
    try:
        req = urllib.request.Request(router.base_url + "/v1/models")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req)
        assert e.value.code == 401
        assert json.loads(e.value.read())["error"]["type"] == "authentication_error"
        req = urllib.request.Request(router.base_url + "/nope", headers={"Authorization": "Bearer " + API_KEY})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req)
        assert e.value.code == 404
        # Garbage and an oversized body close their connections; the router keeps serving.
        with socket.create_connection(("127.0.0.1", router.port)) as sock:
            sock.sendall(b"\x00\xff GARBAGE / HTTP/9.9\r\n\r\n" * 50)
            sock.settimeout(5)
            try:
                sock.recv(100)
            except OSError:
                pass
        big = urllib.request.Request(router.base_url + "/v1/completions", data=b"x" * (33 << 20),
                                     headers={"Authorization": "Bearer " + API_KEY})
        try:
            urllib.request.urlopen(big)
            raise AssertionError("an oversized body was accepted")
        except urllib.error.HTTPError as h:
            assert h.code == 413
        except OSError:
            pass  # the router may close before the client has sent it all
        with urllib.request.urlopen(router.base_url + "/health") as r:
            assert r.status == 200
    finally:
        router.stop()


def test_dead_workers_are_routed_around_then_503():
    a, b = Server(), Server()
    router = Router([a, b], ["--policy", "round_robin"])
    try:
        client = _client(router.base_url)
        model = client.models.list().data[0].id
        a.proc.kill()
        a.proc.wait()
        for _ in range(4):  # every request lands on b, some after a failed connect to a
            c = client.completions.create(model=model, prompt="hi", max_tokens=3, temperature=0)
            assert c.choices[0].finish_reason in ("length", "stop")
        time.sleep(1.0)
        m = router.metrics()
        assert m[f'peregrine:router_worker_healthy{{worker="{a.base_url}"}}'] == 0
        assert m[f'peregrine:router_worker_healthy{{worker="{b.base_url}"}}'] == 1
        b.proc.kill()
        b.proc.wait()
        time.sleep(1.0)
        import openai
        with pytest.raises(openai.APIStatusError) as e:
            client.completions.create(model=model, prompt="hi", max_tokens=3)
        assert e.value.status_code == 503
        assert e.value.body["message"] == "no worker could take the request"
        with pytest.raises(urllib.error.HTTPError) as h:
            urllib.request.urlopen(router.base_url + "/health")
        assert h.value.code == 503
    finally:
        router.stop()
        a.stop()
        b.stop()


def test_a_stream_whose_worker_dies_ends_with_an_error_event():
    w = Server()
    router = Router([w])
    try:
        model = _client(router.base_url).models.list().data[0].id
        body = json.dumps({"model": model, "prompt": "Tell a long story", "max_tokens": 4000, "stream": True,
                           "ignore_eos": True}).encode()
        req = urllib.request.Request(router.base_url + "/v1/completions", data=body,
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer " + API_KEY})
        events = []
        with urllib.request.urlopen(req, timeout=60) as r:
            killed = False
            for raw in r:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if len(events) == 3 and not killed:
                    w.proc.kill()
                    killed = True
        assert events[-1] == "[DONE]"
        last = json.loads(events[-2])
        assert last["error"]["code"] == 502
    finally:
        router.stop()
        w.stop()

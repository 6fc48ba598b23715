"""The HTTP layer on the wire, with raw sockets: framing that could smuggle a request, HEAD,
a huge JSON object, error codes, the utility routes (/version, /v1/models/{id}, /tokenize,
/detokenize) and a second SIGTERM during a drain."""
import json
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

from conftest import API_KEY, BIN, Server

AUTH = {"Authorization": "Bearer " + API_KEY}


def raw(server, data, timeout=5.0):
    """Sends `data` on a fresh connection and reads until the server closes it."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                return out, True
            out += chunk
        return out, False


def call(server, method, path, body=None, headers=AUTH):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(server.base_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_ambiguous_framing_is_refused_and_the_hidden_request_never_answered(server):
    hidden = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + API_KEY.encode() + b"\r\n\r\n"
    cases = [
        (b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n" + hidden, b"501"),
        (b"Transfer-Encoding: identity\r\n", hidden, b"400"),
        (b"Transfer-Encoding: chunked, chunked\r\n", b"0\r\n\r\n" + hidden, b"400"),
        (b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", b"0\r\n\r\n" + hidden, b"400"),
        (b"Content-Length: %d\r\nTransfer-Encoding: identity\r\n" % len(hidden), hidden, b"400"),
    ]
    for fields, body, status in cases:
        reply, closed = raw(server, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n" + body)
        assert reply.startswith(b"HTTP/1.1 " + status), (fields, reply[:200])
        assert reply.count(b"HTTP/1.1") == 1, reply
        assert b'"object":"list"' not in reply
        assert closed, fields
        envelope = json.loads(reply.split(b"\r\n\r\n", 1)[1])
        assert isinstance(envelope["error"]["code"], str)
    assert call(server, "GET", "/health")[0] == 200


def test_head_gets_headers_and_no_body(server):
    for path in ("/health", "/v1/models", "/version"):
        status, body = call(server, "GET", path)
        reply, closed = raw(server, b"HEAD " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                            + API_KEY.encode() + b"\r\nConnection: close\r\n\r\n")
        head, _, rest = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 %d" % status), head
        assert b"content-length: %d" % len(body) in head, head
        assert rest == b"" and closed, rest


def test_one_object_of_150000_keys_is_parsed_quickly_without_stalling_others(server):
    fields = ",".join(f'"k{i}":{i}' for i in range(150000))
    body = ('{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,' + fields + "}").encode()
    result = {}

    def big():
        t0 = time.time()
        result["status"] = call(server, "POST", "/v1/chat/completions", body)[0]
        result["seconds"] = time.time() - t0

    t = threading.Thread(target=big)
    t.start()
    worst = 0.0
    while t.is_alive():
        t0 = time.time()
        assert call(server, "GET", "/health")[0] == 200
        worst = max(worst, time.time() - t0)
        time.sleep(0.05)
    t.join()
    assert result["status"] == 200
    assert result["seconds"] < 10, result
    assert worst < 1.0, worst


def test_4xx_bodies_have_string_codes(server):
    cases = [("POST", "/v1/chat/completions", b"{"), ("POST", "/v1/chat/completions", {}),
             ("POST", "/v1/completions", {"prompt": "x", "max_tokens": "abc"}),
             ("POST", "/v1/completions", {"prompt": [-1]}), ("GET", "/nope", None),
             ("GET", "/v1/completions", None), ("GET", "/v1/models/nope", None)]
    for method, path, body in cases:
        status, data = call(server, method, path, body)
        assert 400 <= status < 500, (path, status)
        assert isinstance(json.loads(data)["error"]["code"], str), (path, data)
    assert json.loads(call(server, "GET", "/v1/models/nope")[1])["error"]["code"] == "model_not_found"


def test_version_model_and_tokenize_routes(server, hf_tokenizer):
    version = subprocess.run([BIN, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    assert version
    assert json.loads(call(server, "GET", "/version")[1]) == {"version": version}
    models = json.loads(call(server, "GET", "/v1/models")[1])["data"]
    one = json.loads(call(server, "GET", "/v1/models/" + models[0]["id"])[1])
    assert one["id"] == models[0]["id"] and one["object"] == "model"

    t = json.loads(call(server, "POST", "/tokenize", {"prompt": "Hello world", "add_special_tokens": False,
                                                        "return_token_strs": True})[1])
    assert t["tokens"] == hf_tokenizer.encode("Hello world", add_special_tokens=False).ids
    assert t["count"] == len(t["tokens"]) and len(t["token_strs"]) == t["count"]
    assert t["max_model_len"] > 0
    back = json.loads(call(server, "POST", "/detokenize", {"tokens": t["tokens"]})[1])
    assert back == {"prompt": "Hello world"}
    chat = json.loads(call(server, "POST", "/tokenize", {"messages": [{"role": "user", "content": "hi"}]})[1])
    assert chat["count"] > 2
    assert call(server, "POST", "/detokenize", {"tokens": [-1]})[0] == 400
    assert call(server, "POST", "/detokenize", {"tokens": [10 ** 9]})[0] == 400
    assert call(server, "POST", "/tokenize", {"prompt": "x", "model": "nope"})[0] == 404


def test_second_sigterm_ends_open_streams_with_a_final_event():
    s = Server(["--drain-timeout", "120"])
    try:
        body = json.dumps({"prompt": "stream for a long while", "max_tokens": 3000, "stream": True,
                           "ignore_eos": True}).encode()
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + API_KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(body)
                     + body)
        got = b""
        while b"data: {" not in got:
            got += sock.recv(65536)
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert s.proc.poll() is None  # draining, the stream goes on
        s.proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 20
        while time.time() < deadline and b"0\r\n\r\n" not in got[-16:]:
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
        sock.close()
        assert b"server_shutting_down" in got, got[-500:]
        assert got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"), got[-200:]  # the last event, then the end
        assert s.proc.wait(timeout=20) == 0
    finally:
        s.stop()

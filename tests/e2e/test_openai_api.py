"""The real server on the embedded demo model, driven by the official `openai` client.

The demo model is tiny, so its text is no benchmark of quality: the tests check the API's
shapes, numbers and invariants, and reproducibility, not prose.
"""
import asyncio
import json
import urllib.error
import urllib.request

import openai
import pytest


def model_id(client):
    models = client.models.list().data
    assert len(models) == 1
    return models[0].id


def test_models_and_health(client, server):
    assert model_id(client)
    with urllib.request.urlopen(server.base_url + "/health") as r:
        assert r.status == 200


def test_completion_greedy_is_reproducible_and_usage_is_exact(client, hf_tokenizer):
    prompt = "The quick brown fox jumps over the lazy dog."
    a = client.completions.create(model=model_id(client), prompt=prompt, max_tokens=12, temperature=0)
    b = client.completions.create(model=model_id(client), prompt=prompt, max_tokens=12, temperature=0)
    assert a.choices[0].text == b.choices[0].text
    assert a.choices[0].finish_reason in ("length", "stop")
    assert a.usage.prompt_tokens == len(hf_tokenizer.encode(prompt, add_special_tokens=False).ids)
    assert a.usage.completion_tokens <= 12
    assert a.usage.total_tokens == a.usage.prompt_tokens + a.usage.completion_tokens


def test_streamed_completion_equals_non_streamed(client):
    kw = dict(model=model_id(client), prompt="Streaming check: 中文 emoji 🙂", max_tokens=16, temperature=0)
    whole = client.completions.create(**kw).choices[0].text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole
    usage = [c.usage for c in chunks if c.usage]
    assert len(usage) == 1 and usage[0].completion_tokens > 0


def test_chat_stream_and_non_stream_agree(client):
    msgs = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
    kw = dict(model=model_id(client), messages=msgs, max_tokens=16, temperature=0)
    whole = client.chat.completions.create(**kw)
    parts = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    content = "".join((c.choices[0].delta.content or "") for c in parts if c.choices)
    reasoning = "".join((getattr(c.choices[0].delta, "reasoning_content", None) or "") for c in parts if c.choices)
    msg = whole.choices[0].message
    assert content == (msg.content or "")
    assert reasoning == (getattr(msg, "reasoning_content", None) or "")
    assert [c for c in parts if c.usage][0].usage.completion_tokens == whole.usage.completion_tokens


def test_thinking_switch_routes_text_to_reasoning(client):
    kw = dict(model=model_id(client), messages=[{"role": "user", "content": "Think first."}], max_tokens=12,
              temperature=0)
    thinking = client.chat.completions.create(extra_body={"chat_template_kwargs": {"thinking": True}}, **kw)
    chat = client.chat.completions.create(extra_body={"chat_template_kwargs": {"thinking": False}}, **kw)
    # Thinking mode starts inside the reasoning: the demo model never closes it, so all of its
    # text is reasoning_content; chat mode has no reasoning at all.
    assert getattr(thinking.choices[0].message, "reasoning_content", None)
    assert not thinking.choices[0].message.content
    assert getattr(chat.choices[0].message, "reasoning_content", None) in (None, "")
    assert chat.choices[0].message.content
    # The prompts differ (<think> vs </think>), so the usage differs by the mode token only.
    assert thinking.usage.prompt_tokens == chat.usage.prompt_tokens


def test_n_and_seeds(client):
    kw = dict(model=model_id(client), prompt="Sample me", max_tokens=8, temperature=1.0, top_p=0.9)
    a = client.completions.create(n=3, seed=1234, **kw)
    b = client.completions.create(n=3, seed=1234, **kw)
    assert len(a.choices) == 3 and sorted(c.index for c in a.choices) == [0, 1, 2]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert 3 <= a.usage.completion_tokens <= 3 * 8


def test_logprobs_shapes(client):
    r = client.chat.completions.create(model=model_id(client), messages=[{"role": "user", "content": "x"}],
                                       max_tokens=5, temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0.0
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
        # Greedy: the chosen token is the most likely one.
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-5)
    c = client.completions.create(model=model_id(client), prompt="x", max_tokens=4, temperature=0, logprobs=2)
    assert len(c.choices[0].logprobs.tokens) == len(c.choices[0].logprobs.token_logprobs)


def test_prompt_logprobs_agree_with_generation(client, server):
    """What lm-evaluation-harness asks (echo, logprobs, max_tokens 0) and vLLM's
    prompt_logprobs score a prompt with the logits a generation samples from: at every cut of
    the prompt, the greedy next token's logprob is the rank-1 entry there."""
    m = model_id(client)
    text = "def add(a, b):\n    return a + b\n"
    req = urllib.request.Request(server.base_url + "/tokenize", data=json.dumps({"model": m, "prompt": text}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer e2e-secret-key"})
    with urllib.request.urlopen(req) as r:
        ids = json.loads(r.read())["tokens"]
    assert len(ids) > 6
    scored = client.completions.create(model=m, prompt=ids, max_tokens=0, echo=True, logprobs=1,
                                       extra_body={"prompt_logprobs": 1}).model_dump()
    choice = scored["choices"][0]
    assert choice["finish_reason"] == "length"
    assert scored["usage"]["completion_tokens"] == 0
    echo = choice["logprobs"]
    assert len(echo["token_logprobs"]) == len(ids)
    assert echo["token_logprobs"][0] is None and echo["top_logprobs"][0] is None
    vllm = choice["prompt_logprobs"]
    assert len(vllm) == len(ids) and vllm[0] is None
    for k in range(1, len(ids)):
        own = vllm[k][str(ids[k])]
        assert own["logprob"] == pytest.approx(echo["token_logprobs"][k], abs=1e-6)
        assert own["rank"] >= 1
        best = [e for e in vllm[k].values() if e["rank"] == 1]
        assert best and best[0]["logprob"] >= own["logprob"] - 1e-6
    for k in (1, len(ids) // 2, len(ids) - 1):
        gen = client.completions.create(model=m, prompt=ids[:k], max_tokens=1, temperature=0, logprobs=1)
        best = max(e["logprob"] for e in vllm[k].values())
        assert gen.choices[0].logprobs.token_logprobs[0] == pytest.approx(best, abs=1e-4), k


def test_stop_strings_end_the_text(client):
    kw = dict(model=model_id(client), prompt="Stop test", max_tokens=24, temperature=0)
    full = client.completions.create(**kw).choices[0].text
    if len(full) < 4:
        pytest.skip("the demo model ended too early to pick a stop string")
    stop = full[len(full) // 2: len(full) // 2 + 2]
    cut = client.completions.create(stop=[stop], **kw).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.text == full[: full.index(stop)]


def test_tool_round_trip_renders_and_answers(client):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
    ]
    r = client.chat.completions.create(model=model_id(client), messages=messages, tools=tools, max_tokens=8,
                                       temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert r.usage.prompt_tokens > 20


def test_bad_requests_get_openai_errors(client, server):
    m = model_id(client)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=m, prompt="x", max_tokens=-1)
    # The client refuses to encode NaN; send the bare token (invalid JSON, also a 400).
    req = urllib.request.Request(server.base_url + "/v1/completions",
                                 data=b'{"model":"%s","prompt":"x","temperature":NaN}' % m.encode(),
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + server_key()})
    with pytest.raises(urllib.error.HTTPError) as raw:
        urllib.request.urlopen(req)
    assert raw.value.code == 400
    assert json.loads(raw.value.read())["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=m, messages=[])
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=m, prompt=[129280])
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=m, prompt="x " * 20000, max_tokens=4)
    assert e.value.code == "context_length_exceeded"
    bad = openai.OpenAI(base_url=server.base_url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    # Still serving.
    assert client.completions.create(model=m, prompt="alive?", max_tokens=2, temperature=0).choices


def test_256_concurrent_streams_match_sequential_results(client, aclient):
    m = model_id(client)
    prompts = [f"Concurrent request number {i}: " + "lorem ipsum " * (i % 7) for i in range(256)]
    expected = {}
    for p in set(prompts[:8]):
        expected[p] = client.completions.create(model=m, prompt=p, max_tokens=6, temperature=0).choices[0].text

    async def one(p):
        text = ""
        stream = await aclient.completions.create(model=m, prompt=p, max_tokens=6, temperature=0, stream=True)
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].text
        return text

    async def run_all():
        return await asyncio.gather(*(one(p) for p in prompts))

    results = asyncio.run(run_all())
    assert len(results) == 256
    # Deterministic greedy decoding is batch-invariant: same text alone or among 256.
    for p, text in zip(prompts, results):
        if p in expected:
            assert text == expected[p]


def test_logprobs_and_seeded_samples_are_the_same_alone_or_concurrent(client):
    """Greedy and seeded sampled completions with logprobs: each alone, then all at once from
    as many threads (one batch, other prompt lengths chunked beside them): text, token logprobs
    and top-3 alternatives bit for bit the same (the CPU backend is batch-invariant by
    construction)."""
    import concurrent.futures
    m = model_id(client)
    prompts = [f"Batch mates {i}: " + "alpha beta gamma " * (1 + i % 5) for i in range(12)]

    def one(i):
        k = dict(model=m, prompt=prompts[i], max_tokens=10, logprobs=3)
        if i % 2:
            k.update(temperature=0.8, top_p=0.95, seed=100 + i)
        else:
            k.update(temperature=0)
        choice = client.completions.create(**k).choices[0]
        lp = choice.logprobs
        return choice.text, lp.tokens, lp.token_logprobs, [sorted(t.items()) for t in lp.top_logprobs]

    alone = [one(i) for i in range(len(prompts))]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        together = list(pool.map(one, range(len(prompts))))
    for i, (a, t) in enumerate(zip(alone, together)):
        assert a == t, f"request {i} differs alone vs concurrent"


def test_disconnect_storm_returns_to_baseline(client, server):
    import http.client
    m = model_id(client)
    baseline = server.rss_kb()
    body = json.dumps({"model": m, "prompt": "disconnect me " * 50, "max_tokens": 2000, "stream": True})
    for _ in range(3):
        conns = []
        for _ in range(64):
            c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            c.request("POST", "/v1/completions", body=body, headers={
                "Content-Type": "application/json", "Authorization": f"Bearer {server_key()}"})
            conns.append(c)
        for c in conns:
            c.sock.close()
    # Everything is aborted within a few steps and the server keeps answering.
    import time
    for _ in range(100):
        metrics = urllib.request.urlopen(urllib.request.Request(
            server.base_url + "/metrics", headers={"Authorization": f"Bearer {server_key()}"})).read().decode()
        running = [l for l in metrics.splitlines() if l.startswith("peregrine:num_requests_running")]
        if running and float(running[0].split()[-1]) == 0.0:
            break
        time.sleep(0.2)
    else:
        pytest.fail("requests still running after the disconnect storm")
    assert client.completions.create(model=m, prompt="alive?", max_tokens=2, temperature=0).choices
    assert server.rss_kb() < baseline * 1.5 + 64 * 1024


def server_key():
    from conftest import API_KEY
    return API_KEY


def test_prefix_cache_serves_repeated_prompts_and_keeps_tenants_apart(client, server):
    """A long shared prompt is served from the prefix cache the second time (usage says how
    much), with the same greedy text; another cache_salt shares nothing."""
    m = model_id(client)
    system = "You answer questions about the history of the printing press in detail. " * 40
    kw = dict(model=m, max_tokens=8, temperature=0)
    first = client.completions.create(prompt=system + "First question?", **kw)
    again = client.completions.create(prompt=system + "First question?", **kw)
    other = client.completions.create(prompt=system + "A different question?", **kw)
    salted = client.completions.create(prompt=system + "First question?", extra_body={"cache_salt": "tenant-b"}, **kw)
    assert again.choices[0].text == first.choices[0].text
    assert salted.choices[0].text == first.choices[0].text
    cached = lambda r: r.usage.prompt_tokens_details.cached_tokens
    assert cached(first) == 0
    assert cached(again) >= 256 and cached(again) < again.usage.prompt_tokens
    assert cached(other) >= 256
    assert cached(salted) == 0
    metrics = urllib.request.urlopen(urllib.request.Request(
        server.base_url + "/metrics", headers={"Authorization": f"Bearer {server_key()}"})).read().decode()
    hits = [l for l in metrics.splitlines() if l.startswith("peregrine:prefix_cache_hits_total")]
    assert hits and float(hits[0].split()[-1]) >= cached(again) + cached(other)
    import openai
    with pytest.raises(openai.BadRequestError):
        client.completions.create(prompt="x", extra_body={"cache_salt": 5}, **kw)

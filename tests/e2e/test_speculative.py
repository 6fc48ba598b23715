"""Speculative decoding through the real server and the official openai client: a server
drafting with the demo model's MTP layer (chains and DDTree trees) answers greedy and seeded
requests, streamed and not, with the same text and logprobs as one that does not speculate,
and its /metrics carry vLLM's spec_decode counters."""
import re
import urllib.request

import pytest

from conftest import API_KEY, Server

PROMPTS = [
    "The history of the city begins",
    "def fibonacci(n):\n",
    "In 1905, Albert Einstein published",
]


@pytest.fixture(scope="module", params=[
    ["--speculative-algorithm", "mtp", "--speculative-num-steps", "3"],
    ["--speculative-algorithm", "ddtree", "--speculative-num-steps", "4", "--speculative-num-draft-tokens", "9",
     "--speculative-eagle-topk", "3"],
], ids=["mtp", "ddtree"])
def spec_server(request):
    s = Server(request.param)
    yield s
    s.stop()


def _client(server):
    import openai
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0, timeout=120)


def _answers(client, stream):
    model = client.models.list().data[0].id
    out = []
    for i, prompt in enumerate(PROMPTS):
        kw = dict(model=model, prompt=prompt, max_tokens=48, logprobs=2)
        kw.update(dict(temperature=0) if i % 2 == 0 else dict(temperature=0.8, top_p=0.95, seed=11 + i))
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


def test_speculative_server_answers_as_the_plain_one(server, spec_server):
    plain, spec = _client(server), _client(spec_server)
    for stream in (False, True):
        want, got = _answers(plain, stream), _answers(spec, stream)
        for (wt, wl), (gt, gl) in zip(want, got):
            assert gt == wt
            assert gl == pytest.approx(wl, abs=1e-6)
    with urllib.request.urlopen(spec_server.base_url + "/metrics") as r:
        metrics = r.read().decode()
    drafts = float(re.search(r"^peregrine:spec_decode_num_drafts_total\{[^}]*\} (\S+)$", metrics, re.M).group(1))
    accepted = float(re.search(r"^peregrine:spec_decode_num_accepted_tokens_total\{[^}]*\} (\S+)$", metrics,
                               re.M).group(1))
    assert drafts > 0 and accepted > 0
    assert "spec_decode_num_accepted_tokens_per_pos_total" in metrics

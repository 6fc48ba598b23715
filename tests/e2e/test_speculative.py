"""Speculative decoding through the real server and the official openai client: a server
drafting with the demo model's MTP layer (chains and DDTree trees) answers greedy and seeded
requests, streamed and not, with the same text and logprobs as one that does not speculate,
and its /metrics carry vLLM's spec_decode counters."""
import re
import urllib.request

import pytest

from conftest import Server, completion_answers, openai_client

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


def test_speculative_server_answers_as_the_plain_one(server, spec_server):
    plain, spec = openai_client(server), openai_client(spec_server)
    for stream in (False, True):
        want = completion_answers(plain, PROMPTS, stream, max_tokens=48, seed_base=11)
        got = completion_answers(spec, PROMPTS, stream, max_tokens=48, seed_base=11)
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

"""Through the server path, a logit bias and top-k keep the output distributed exactly as the
target's own biased, top-k distribution, whatever the draft proposed.

Each request continues "in" for three tokens with its own seed, drafting with the draft model at
K = 2. On the tiny target the first token (read from the prompt pass, no speculation) is one token
with probability ~1 under this bias, and the second is spread over several (the first speculative
cycle emits it: an accepted draft token or a resample from the residual). Its empirical
distribution over many requests is compared with the target's exact processed distribution by a
chi-square test (the helpers of tests/lossless.py). The draft's own distribution
there differs a lot from the target's (most of its mass is on a token the target gives little),
and the same test through the same server catches a rule that accepts every draft token.
"""

from __future__ import annotations

import pytest
from lossless import chi_square_pvalue
from serving import Served, served_at_home

from spectui.engine.generation_config import SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step import sampling, speculative

N_REQUESTS = 1000
PROMPT = "in"
TOP_K = 6


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Served:
    home = tmp_path_factory.mktemp("home")
    with served_at_home(home, tiny_pair.target, tiny_pair.draft, "--drafter", "model", "-k", "2") as running:
        yield running


def biased_config(pair) -> tuple[SamplingConfig, list[int], int]:
    """T = 1, top-k 6, and a bias that bans the target's second choice at the second position and
    lifts its fourth; the prompt's tokens, and the first token (what the second is conditioned on)."""
    plain = SamplingConfig(temperature=1.0, top_k=TOP_K, top_p=1.0, min_p=0.0)
    with LlamaModel.load(pair.target, n_ctx=256) as target:
        context = target.tokenize(PROMPT)
        first = int(sampling.distribution(target.sync(context).copy(), plain).ids[0])
        second = sampling.distribution(target.sync([*context, first]).copy(), plain)
    bias = ((int(second.ids[1]), float("-inf")), (int(second.ids[3]), 1.5))
    return SamplingConfig(1.0, TOP_K, 1.0, 0.0, logit_bias=tuple(sorted(bias))), context, first


def exact(pair, context: list[int], cfg: SamplingConfig) -> sampling.Dist:
    with LlamaModel.load(pair.target, n_ctx=256) as fresh:
        return sampling.distribution(fresh.sync(context).copy(), cfg)


def second_tokens(server: Served, cfg: SamplingConfig, n: int) -> tuple[list[list[int]], int, int]:
    """n replies' tokens, and the draft tokens proposed and accepted over all of them."""
    bias = [[token, False if value == float("-inf") else value] for token, value in cfg.logit_bias]
    outputs, drafted, accepted = [], 0, 0
    with server.http() as http:
        for seed in range(n):
            body = {"prompt": PROMPT, "max_tokens": 3, "temperature": cfg.temperature, "top_k": cfg.top_k,
                    "top_p": 1.0, "min_p": 0.0, "logit_bias": bias, "seed": seed, "return_tokens": True}
            reply = http.post("/v1/completions", json=body).json()
            outputs.append(reply["tokens"])
            drafted += reply["timings"].get("draft_n", 0)
            accepted += reply["timings"].get("draft_n_accepted", 0)
    return outputs, drafted, accepted


def test_bias_and_top_k_through_the_server_keep_the_targets_distribution(server, tiny_pair) -> None:
    cfg, context, first = biased_config(tiny_pair)
    assert exact(tiny_pair, context, cfg).prob(first) > 0.99, "precondition: the first token is (nearly) fixed"
    expected = exact(tiny_pair, [*context, first], cfg)
    assert len(expected.ids) >= 3 and expected.top_prob() < 0.6, "precondition: a spread-out second token"
    outputs, drafted, accepted = second_tokens(server, cfg, N_REQUESTS)
    assert N_REQUESTS * 0.1 < accepted < drafted - N_REQUESTS * 0.1  # draft tokens both accepted and rejected
    seconds = [out[1] for out in outputs if out[0] == first and len(out) > 1]
    assert len(seconds) > N_REQUESTS * 0.95
    banned = cfg.logit_bias[0][0] if cfg.logit_bias[0][1] == float("-inf") else cfg.logit_bias[1][0]
    assert banned not in seconds
    p = chi_square_pvalue(seconds, expected)
    assert p > 0.001, f"the second token does not follow the target's biased top-k distribution (p={p:.2g})"


def test_the_same_check_through_the_server_catches_an_always_accept_rule(server, tiny_pair, monkeypatch) -> None:
    monkeypatch.setattr(speculative, "accept_draft_token", lambda p_d, q_d, u: True)
    cfg, context, first = biased_config(tiny_pair)
    outputs, _, _ = second_tokens(server, cfg, N_REQUESTS // 4)
    seconds = [out[1] for out in outputs if out[0] == first and len(out) > 1]
    p = chi_square_pvalue(seconds, exact(tiny_pair, [*context, first], cfg))
    assert p < 1e-6, "accepting every draft token emits the draft's distribution and must be caught"

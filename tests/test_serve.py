"""`spectui serve` through the real `openai` client: chat and completions, streamed and not, the
figures (usage, timings), reasoning, logprobs, grammars, stops, the prompt cache, metrics.

Every reply comes from the real engine on the generated tiny models (`tests/tiny_gguf.py`): the
greedy reply through the server must equal `spectui bench`'s speculation-off output token for token.
"""

from __future__ import annotations

import json

import pytest
import scripted_gguf
import tiny_gguf
from serving import Served, served, served_at_home

from spectui.bench import run_all, workload
from spectui.engine.generation_config import GenerationConfig, SamplingConfig

GREEDY = {"temperature": 0}
QUESTION = "Tell me about gears."


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Served:
    home = tmp_path_factory.mktemp("home")
    with served_at_home(home, tiny_pair.target, tiny_pair.draft) as running:
        yield running


def bench_off(pair, prompt: str, max_tokens: int) -> tuple[int, ...]:
    """What `spectui bench` decodes with speculation off (K = 0) for this one prompt."""
    from spectui.engine.generator import load_generator

    gen = load_generator(pair.target, pair.draft, n_ctx=4096, n_threads=2)
    try:
        work = workload(gen, [prompt], GenerationConfig(max_tokens=max_tokens, sampling=SamplingConfig()), None)
        return run_all(gen, work, 0).outputs[0]
    finally:
        gen.close()


def chat(server: Served, content: str = QUESTION, **fields: object):  # type: ignore[no-untyped-def]
    extra = {key: fields.pop(key) for key in ("k", "drafter", "return_tokens", "top_k", "min_p", "grammar")
             if key in fields}
    return server.client().chat.completions.create(model="tiny", messages=[{"role": "user", "content": content}],
                                                   extra_body=extra or None, **fields)


# ----- chat ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", ["auto", 3, 0])
def test_greedy_chat_equals_bench_speculation_off_token_for_token(server, tiny_pair, k) -> None:
    expected = bench_off(tiny_pair, QUESTION, 40)
    reply = chat(server, max_tokens=40, k=k, return_tokens=True, **GREEDY)
    assert tuple(reply.model_extra["tokens"]) == expected
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 40
    timings = reply.model_extra["timings"]
    assert timings["predicted_n"] == 40 and timings["prompt_n"] + timings["cache_n"] == reply.usage.prompt_tokens
    if k != 0:
        assert 0 < timings["draft_n_accepted"] <= timings["draft_n"]  # the draft proposed, and was partly right
    else:
        assert "draft_n" not in timings


def test_the_eos_pair_stops_at_eos_as_bench_does(eos_pair, tmp_path, monkeypatch) -> None:
    from conftest import EOS_PROMPT

    monkeypatch.setenv("SPECTUI_HOME", str(tmp_path / "home"))
    expected = bench_off(eos_pair, EOS_PROMPT, 64)
    with served(eos_pair.target, eos_pair.draft, "-k", "3") as running:
        reply = chat(running, EOS_PROMPT, max_tokens=64, return_tokens=True, **GREEDY)
    assert tuple(reply.model_extra["tokens"]) == expected and len(expected) < 64
    assert reply.choices[0].finish_reason == "stop"


def test_a_streamed_chat_is_the_same_reply_in_chunks_with_usage_and_timings_last(server) -> None:
    reply = chat(server, max_tokens=200, **GREEDY)
    whole, n = reply.choices[0].message.content, reply.usage.completion_tokens
    chunks = list(chat(server, max_tokens=200, stream=True, stream_options={"include_usage": True}, **GREEDY))
    first, *middle, finish, usage = chunks
    assert first.choices[0].delta.role == "assistant" and first.choices[0].delta.content is None
    assert len({c.id for c in chunks}) == 1 and all(c.object == "chat.completion.chunk" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in middle) == whole and len(middle) > 1
    assert finish.choices[0].finish_reason == reply.choices[0].finish_reason and not finish.choices[0].delta.content
    assert usage.choices == [] and usage.usage.completion_tokens == n > 40
    assert usage.model_extra["timings"]["predicted_n"] == n


def test_a_reasoning_reply_puts_its_thinking_in_reasoning_content(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECTUI_HOME", str(tmp_path / "home"))
    pair = scripted_gguf.write_scripted_pair(tmp_path / "thinking")
    with served(pair.target, pair.draft) as running:
        reply = chat(running, "How many gears?", max_tokens=32, **GREEDY)
        message = reply.choices[0].message
        assert (message.content.strip(), message.model_extra["reasoning_content"]) == ("Four gears!", "Let me count.")
        assert reply.usage.completion_tokens_details.reasoning_tokens == 6  # <think>, Let, me, count, ., </think>
        deltas = [c.choices[0].delta for c in chat(running, "How many gears?", max_tokens=32, stream=True, **GREEDY)
                  if c.choices]
        thought = "".join(d.model_extra.get("reasoning_content") or "" for d in deltas)
        said = "".join(d.content or "" for d in deltas)
        assert (thought, said.strip()) == ("Let me count.", "Four gears!")
        off = running.client().chat.completions.create(
            model="x", max_tokens=32, temperature=0, messages=[{"role": "user", "content": "How many gears?"}],
            extra_body={"chat_template_kwargs": {"enable_thinking": False}})
        # the template wrote an empty think block after the generation prompt
        assert off.usage.prompt_tokens > reply.usage.prompt_tokens
        again = running.client().chat.completions.create(model="x", max_tokens=32, temperature=0, messages=[
            {"role": "user", "content": "How many gears?"},
            {"role": "assistant", "content": "Four gears!", "reasoning_content": "Let me count."},
            {"role": "user", "content": "And now?"}])
        assert again.choices[0].message.content.strip() == "Four gears!"


# ----- completions ---------------------------------------------------------------------------------


def test_completions_streamed_and_not_continue_the_raw_prompt(server) -> None:
    client = server.client()
    whole = client.completions.create(model="tiny", prompt="in the", max_tokens=16, temperature=0,
                                      extra_body={"return_tokens": True})
    assert whole.object == "text_completion" and whole.choices[0].finish_reason == "length"
    assert whole.usage.prompt_tokens == 2  # "in", " the": no chat template, no BOS (the tiny vocab adds none)
    streamed = list(client.completions.create(model="tiny", prompt="in the", max_tokens=16, temperature=0,
                                              stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == whole.choices[0].text
    assert streamed[-1].choices[0].finish_reason == "length"
    ids = [tiny_gguf.vocabulary().index(token) for token in ("in", "Ġthe")]
    by_ids = client.completions.create(model="tiny", prompt=ids, max_tokens=16, temperature=0)
    assert by_ids.choices[0].text == whole.choices[0].text  # the same prompt given as token ids


def test_logprobs_are_the_targets_whatever_the_drafter_proposed(server) -> None:
    from numerics import LOGIT_RTOL

    def entries(k: object) -> list:
        reply = chat(server, max_tokens=12, logprobs=True, top_logprobs=3, k=k, **GREEDY)
        return reply.choices[0].logprobs.content

    plain, drafted = entries(0), entries(3)
    assert len(plain) == len(drafted) == 12
    for a, b in zip(plain, drafted, strict=True):
        assert a.token == b.token and len(a.top_logprobs) == len(b.top_logprobs) == 3
        assert a.top_logprobs[0].token == a.token  # greedy: the chosen token is the most likely
        # a verify pass and single rows round differently (tests/numerics.py); logprobs of ~-1 to -10
        assert abs(a.logprob - b.logprob) <= LOGIT_RTOL * 10
    legacy = server.client().completions.create(model="tiny", prompt="in the", max_tokens=5, temperature=0,
                                                logprobs=2)
    logprobs = legacy.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 5
    assert "".join(logprobs.tokens) == legacy.choices[0].text or "\ufffd" in legacy.choices[0].text


# ----- what a request asks for ------------------------------------------------------------------------


def test_a_json_schema_is_followed_with_speculation_on_and_off(server) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
              "required": ["ok", "n"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    replies = [chat(server, max_tokens=40, response_format=fmt, k=k, return_tokens=True, **GREEDY) for k in (0, 3)]
    assert replies[0].model_extra["tokens"] == replies[1].model_extra["tokens"]
    value = json.loads(replies[0].choices[0].message.content)
    assert set(value) == {"ok", "n"} and isinstance(value["ok"], bool) and value["n"] in (1, 2, 3)
    assert replies[0].choices[0].finish_reason == "stop"  # the grammar completed, then the end token
    sampled = chat(server, max_tokens=40, response_format=fmt, temperature=1.0, seed=5, k=3)
    assert set(json.loads(sampled.choices[0].message.content)) == {"ok", "n"}
    anything = chat(server, max_tokens=8, response_format={"type": "json_object"}, **GREEDY)
    assert anything.choices[0].message.content.startswith("{")


def test_a_grammar_or_a_schema_in_llama_servers_fields_and_every_name_for_max_tokens(server) -> None:
    with server.http() as http:
        def ask(**fields: object) -> dict:
            body = {"messages": [{"role": "user", "content": QUESTION}], "temperature": 0, **fields}
            return http.post("/v1/chat/completions", json=body).json()

        yes_no = ask(grammar='root ::= ("yes" | "no") "."', max_tokens=8)["choices"][0]["message"]["content"]
        assert yes_no in ("yes.", "no.")
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                  "additionalProperties": False}
        assert set(json.loads(ask(json_schema=schema, max_tokens=20)["choices"][0]["message"]["content"])) == {"ok"}
        for name in ("max_tokens", "max_completion_tokens", "n_predict"):
            assert ask(**{name: 5})["usage"]["completion_tokens"] == 5, name
        assert ask(max_tokens=9, max_completion_tokens=4)["usage"]["completion_tokens"] == 4  # the newer name wins


def test_a_logit_bias_changes_the_reply_the_same_with_speculation_on_and_off(server) -> None:
    plain = chat(server, max_tokens=10, return_tokens=True, **GREEDY).model_extra["tokens"]
    banned = {str(plain[0]): -100, str(plain[3]): False}  # OpenAI's -100 and llama-server's false
    biased = [chat(server, max_tokens=10, logit_bias=banned, return_tokens=True, k=k, **GREEDY).model_extra["tokens"]
              for k in (0, 3, "auto")]
    assert biased[0] == biased[1] == biased[2] and biased[0] != plain
    assert plain[0] not in biased[0] and plain[3] not in biased[0]


def test_a_stop_string_ends_the_reply_and_never_shows(server) -> None:
    whole = chat(server, max_tokens=30, **GREEDY).choices[0].message.content
    stop = whole[10:13]
    cut = chat(server, max_tokens=30, stop=[stop], **GREEDY)
    assert cut.choices[0].message.content == whole[:whole.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in chat(server, max_tokens=30, stop=stop,
                                                                       stream=True, **GREEDY) if c.choices)
    assert streamed == whole[:whole.index(stop)]


@pytest.mark.parametrize("k", [0, 3])
def test_a_seed_repeats_a_sampled_reply(server, k) -> None:
    """With speculation, the same seed repeats the reply when the drafter proposes the same tokens
    (the draft model does; the suffix lookup learns from every reply, so `model+suffix` may not:
    its replies follow the same distribution, not the same draws)."""
    a, b, c = (chat(server, max_tokens=20, temperature=0.9, seed=seed, k=k, drafter="model").choices[0].message.content
               for seed in (11, 11, 12))
    assert a == b and a != c


def test_omitted_sampling_fields_get_the_models_recommended_sampling(server) -> None:
    from spectui.engine.generation_config import LLAMA_CPP_SAMPLING

    assert server.state.defaults.sampling == LLAMA_CPP_SAMPLING  # the tiny GGUF names none
    a, b = (chat(server, max_tokens=20, seed=3, k=0).choices[0].message.content for _ in range(2))
    greedy = chat(server, max_tokens=20, **GREEDY).choices[0].message.content
    assert a == b and a != greedy  # sampled at T 0.8, not greedy


def test_the_next_turn_reuses_the_cached_conversation(server) -> None:
    client = server.client()
    first = [{"role": "user", "content": "A first question about cache reuse."}]
    one = client.chat.completions.create(model="tiny", messages=first, max_tokens=8, temperature=0)
    turn = [*first, {"role": "assistant", "content": one.choices[0].message.content},
            {"role": "user", "content": "And a second one."}]
    two = client.chat.completions.create(model="tiny", messages=turn, max_tokens=8, temperature=0)
    assert two.usage.prompt_tokens_details.cached_tokens >= one.usage.prompt_tokens
    assert two.model_extra["timings"]["prompt_n"] < two.usage.prompt_tokens - one.usage.prompt_tokens + 8


# ----- the routes around the replies ----------------------------------------------------------------------


def test_models_lists_the_pair_and_its_drafters(server) -> None:
    [model] = server.client().models.list().data
    assert model.id == "target" and model.owned_by == "spectui"
    meta = model.model_extra["meta"]
    assert meta["drafter"] == "model+suffix" and "model" in meta["drafters"] and meta["draft"] == "draft.gguf"
    with server.http() as http:
        assert http.get("/health").json() == {"status": "ok"} and http.get("/v1/models").status_code == 200
        assert http.post("/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                     "max_tokens": 2}).status_code == 200  # without /v1 too


def test_metrics_count_requests_tokens_and_drafts(server) -> None:
    chat(server, max_tokens=16, k=3, **GREEDY)
    with server.http() as http:
        text = http.get("/metrics").text
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values['spectui_requests_total{route="chat",status="200"}'] >= 1
    assert values["spectui_generated_tokens_total"] >= 16
    drafted, accepted = (values[f'spectui_{kind}_tokens_total{{drafter="model"}}'] for kind in ("drafted", "accepted"))
    assert drafted >= accepted > 0
    assert values["spectui_time_to_first_token_seconds_count"] >= 1 and values["spectui_reply_acceptance_count"] >= 1


def test_a_models_own_sampling_is_what_requests_get_and_the_command_line_overrides_it(tmp_path, monkeypatch) -> None:
    from dataclasses import replace

    monkeypatch.setenv("SPECTUI_HOME", str(tmp_path / "home"))
    spec = replace(tiny_gguf.TinySpec(), sampling=(("temp", 0.6), ("top_k", 20), ("top_p", 0.9), ("min_p", 0.0)))
    pair = tiny_gguf.write_pair(tmp_path / "recommending", spec=spec)
    with served(pair.target, pair.draft) as running:
        sampling = running.state.defaults.sampling
        assert (sampling.top_k, sampling.min_p) == (20, 0.0)
        assert sampling.temperature == pytest.approx(0.6) and sampling.top_p == pytest.approx(0.9)
    with served(pair.target, pair.draft, "--temperature", "0", "--top-k", "5") as running:
        sampling = running.state.defaults.sampling
        assert (sampling.temperature, sampling.top_k, sampling.min_p) == (0.0, 5, 0.0)

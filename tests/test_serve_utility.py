"""llama-server's utility endpoints on `spectui serve` (/tokenize, /detokenize, /apply-template,
/chat/completions/input_tokens), the continuation of a final assistant message, and a stream's
`prompt_progress`, on the real engine and the generated tiny models (ChatML template).

What the utilities say must be what the chat route does: the prompt /apply-template renders is
the one a reply reads (the same token count, and a continued reply equal, token for token, to
the completion of that text), and hostile bodies are 400s in llama-server's error shape.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import scripted_gguf
from serving import Served, served, served_at_home

from spectui import limits

GREEDY = {"temperature": 0}
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about gears."}]


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Served:
    home = tmp_path_factory.mktemp("home")
    with served_at_home(home, tiny_pair.target, tiny_pair.draft) as running:
        yield running


def post(server: Served, path: str, body: object) -> httpx.Response:
    with server.http() as http:  # as ASCII JSON: a lone surrogate goes as its escape
        return http.post(path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})


def ok(server: Served, path: str, body: object) -> Any:
    answer = post(server, path, body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def refused(server: Served, path: str, body: object, words: str = "") -> str:
    """A 400 in llama-server's shape; its message."""
    answer = post(server, path, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == 400 and error["type"] == "invalid_request_error"
    assert words in error["message"]
    return str(error["message"])


# ----- /tokenize, /detokenize -------------------------------------------------------------------------


def test_tokenize_and_detokenize_round_trip_in_llama_servers_shapes(server) -> None:
    text = "Gears turn, and <|im_start|> is one token."
    tokens = ok(server, "/tokenize", {"content": text})["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert ok(server, "/detokenize", {"tokens": tokens}) == {"content": text}
    pieces = ok(server, "/tokenize", {"content": text, "with_pieces": True})["tokens"]
    assert [p["id"] for p in pieces] == tokens
    assert "".join(p["piece"] for p in pieces) == text  # every piece of this text is whole UTF-8
    literal = ok(server, "/tokenize", {"content": "<|im_start|>", "parse_special": False})["tokens"]
    assert len(ok(server, "/tokenize", {"content": "<|im_start|>"})["tokens"]) == 1 < len(literal)
    assert ok(server, "/tokenize", {}) == {"tokens": []} and ok(server, "/detokenize", {}) == {"content": ""}


def test_tokenize_takes_llama_servers_mixed_lists_and_gives_broken_utf8_as_bytes(server) -> None:
    a, b = (ok(server, "/tokenize", {"content": t})["tokens"] for t in ("gear", " wheel"))
    assert ok(server, "/tokenize", {"content": ["gear", 7, " wheel"]})["tokens"] == [*a, 7, *b]
    pieces = ok(server, "/tokenize", {"content": "é", "with_pieces": True})["tokens"]
    assert len(pieces) == 2 and [p["piece"] for p in pieces] == [[0xC3], [0xA9]]  # the tiny vocabulary is bytes


# ----- /apply-template, input_tokens: the chat route's own prompt --------------------------------------


def test_apply_template_and_input_tokens_are_the_chat_routes_prompt(server) -> None:
    prompt = ok(server, "/apply-template", {"messages": ASK})["prompt"]
    assert prompt == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTell me about gears.<|im_end|>\n"
                      "<|im_start|>assistant\n")
    counted = ok(server, "/v1/chat/completions/input_tokens", {"messages": ASK})
    assert counted == ok(server, "/chat/completions/input_tokens", {"messages": ASK})
    assert counted["object"] == "response.input_tokens"
    reply = server.client().chat.completions.create(model="x", messages=ASK, max_tokens=2, **GREEDY)
    tokens = ok(server, "/tokenize", {"content": prompt, "add_special": True})["tokens"]
    assert counted["input_tokens"] == reply.usage.prompt_tokens == len(tokens)


def test_verbose_answers_with_the_prompt_the_reply_read(server) -> None:
    prompt = ok(server, "/apply-template", {"messages": ASK})["prompt"]  # the tiny model adds no BOS
    body = {"messages": ASK, "max_tokens": 3, "return_tokens": True, **GREEDY}
    answer = ok(server, "/v1/chat/completions", {**body, "verbose": True})
    verbose = answer["__verbose"]
    assert verbose["prompt"] == prompt and verbose["tokens"] == answer["tokens"]
    assert (verbose["tokens_evaluated"], verbose["tokens_predicted"]) == (answer["usage"]["prompt_tokens"], 3)
    assert verbose["stop_type"] == "limit"
    assert "__verbose" not in ok(server, "/v1/chat/completions", body)
    raw = ok(server, "/v1/completions", {"prompt": "Gears", "max_tokens": 2, "verbose": True, **GREEDY})
    assert raw["__verbose"]["prompt"] == "Gears"


def test_apply_template_renders_the_tools_and_checks_the_body_as_the_chat_route(server) -> None:
    refused(server, "/apply-template", {"messages": []}, "messages is empty")
    refused(server, "/apply-template", {"messages": ASK, "tools": [{"type": "function", "function": {"name": "f"}}]},
            "no tool-call syntax")  # the ChatML test template never reads `tools`, as the chat route says
    refused(server, "/chat/completions/input_tokens", {"messages": [{"role": "user", "content": "x" * 10**6}]},
            "MAX_PROMPT_CHARS_PER_TOKEN")


# ----- continuing a final assistant message ------------------------------------------------------------


def test_a_final_assistant_message_is_continued_not_answered(server) -> None:
    prefill = [*ASK, {"role": "assistant", "content": "Gears are"}]
    prompt = ok(server, "/apply-template", {"messages": prefill})["prompt"]
    assert prompt.endswith("<|im_start|>assistant\nGears are")  # no end of turn, no new turn
    explicit = {"messages": prefill, "continue_final_message": True, "add_generation_prompt": False}
    assert ok(server, "/apply-template", explicit)["prompt"] == prompt  # vLLM's fields: the same prompt
    parts = [*ASK, {"role": "assistant", "content": [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]}]
    assert ok(server, "/apply-template", {"messages": parts})["prompt"].endswith("assistant\nWh\n\nill")
    # the chat route reads that prompt: its reply is the raw completion of the text, token for token
    client = server.client()
    tokens = {"return_tokens": True}
    chat = client.chat.completions.create(model="x", messages=prefill, max_tokens=24, extra_body=tokens, **GREEDY)
    raw = client.completions.create(model="x", prompt=prompt, max_tokens=24, extra_body=tokens, **GREEDY)
    assert chat.model_extra["tokens"] == raw.model_extra["tokens"]
    assert chat.choices[0].message.content == raw.choices[0].text


def test_a_thinking_models_reply_continues_its_reasoning_or_its_answer(tmp_path, monkeypatch) -> None:
    """As llama.cpp continues a message for a template that thinks: the reasoning marker, the
    reasoning, then (for the answer) the closing marker and the content. The scripted (bigram)
    model writes `<think>Lm</think>\\n\\nF!`, each token after the one before it: "L", "m", "F"
    and "!" are letters the prompt's text tokenizes to, so a continued message ends in one."""
    monkeypatch.setenv("SPECTUI_HOME", str(tmp_path / "home"))
    pair = scripted_gguf.write_scripted_pair(tmp_path / "thinking", ("<think>", "L", "m", "</think>", "\n\n", "F", "!"))
    ask = [{"role": "user", "content": "How many gears?"}]
    with served(pair.target, pair.draft) as running:
        def reply(messages: list[dict[str, str]]) -> tuple[str | None, str | None]:
            message = running.client().chat.completions.create(model="x", messages=messages, max_tokens=16,
                                                               **GREEDY).choices[0].message
            return message.model_extra.get("reasoning_content"), message.content

        assert reply(ask) == ("Lm", "\n\nF!")
        thinking = [*ask, {"role": "assistant", "content": "", "reasoning_content": "L"}]
        assert ok(running, "/apply-template", {"messages": thinking})["prompt"].endswith("assistant\n<think>L")
        assert reply(thinking) == ("m", "\n\nF!")  # the reply starts inside the reasoning it continues
        answering = [*ask, {"role": "assistant", "content": "F", "reasoning_content": "Lm"}]
        assert ok(running, "/apply-template", {"messages": answering})["prompt"].endswith(
            "assistant\n<think>Lm</think>F")
        assert reply(answering) == (None, "!")


def test_add_generation_prompt_false_ends_the_prompt_with_the_last_message(server) -> None:
    prompt = ok(server, "/apply-template", {"messages": ASK, "add_generation_prompt": False})["prompt"]
    assert prompt.endswith("Tell me about gears.<|im_end|>\n")


def test_continuations_llama_server_refuses_are_400s_in_its_words(server) -> None:
    both = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
            "add_generation_prompt": True, "continue_final_message": True}
    for path in ("/v1/chat/completions", "/apply-template"):
        refused(server, path, both, "Cannot set both add_generation_prompt and continue_final_message to true.")
    refused(server, "/v1/chat/completions", {"messages": [*ASK, {"role": "assistant", "content": "a"},
                                                          {"role": "assistant", "content": "b"}]},
            "Cannot have 2 or more assistant messages at the end of the list.")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    refused(server, "/v1/chat/completions", {"messages": [*ASK, {"role": "assistant", "tool_calls": [call]}]},
            "Cannot continue an assistant message that contains tool calls.")


# ----- return_progress ---------------------------------------------------------------------------------


def test_return_progress_reports_the_cache_then_the_whole_prompt_read(server) -> None:
    messages = [{"role": "user", "content": "Progress, please: " + "gears and wheels " * 8}]
    body = {"messages": messages, "max_tokens": 4, "stream": True, "return_progress": True,
            "stream_options": {"include_usage": True}, **GREEDY}
    for _ in range(2):  # the second time, the cache holds most of the prompt
        with server.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as answer:
            chunks = [json.loads(line[6:]) for line in answer.iter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
        progress = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
        usage = chunks[-1]["usage"]
        assert len(progress) == 2 and progress[0]["processed"] == progress[0]["cache"]
        assert progress[1]["processed"] == progress[1]["total"] == progress[0]["total"] == usage["prompt_tokens"]
        assert progress[1]["cache"] == usage["prompt_tokens_details"]["cached_tokens"]
        assert all(c["choices"][0]["delta"]["role"] == "assistant" for c in chunks if "prompt_progress" in c)
    assert progress[0]["cache"] > 0
    plain = post(server, "/v1/chat/completions", {**body, "return_progress": False})
    assert "prompt_progress" not in plain.text
    raw = {"prompt": "Progress for a text: " + "cogs " * 9, "max_tokens": 2, "stream": True, "return_progress": True}
    chunks = [json.loads(line[6:]) for line in post(server, "/v1/completions", raw).text.splitlines()
              if line.startswith("data: {")]
    first, read = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
    assert first["processed"] == first["cache"] < read["processed"] == read["total"] == first["total"]
    assert [c["choices"][0]["text"] for c in chunks if "prompt_progress" in c] == ["", ""]


# ----- hostile bodies --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "body", "words"), [
    ("/tokenize", {"content": "x" * 10**6}, "MAX_PROMPT_CHARS_PER_TOKEN"),
    ("/tokenize", {"content": ["a", -1]}, "not in the model's vocabulary"),
    ("/tokenize", {"content": [10**30]}, "not in the model's vocabulary"),
    ("/tokenize", {"content": "a", "with_pieces": "yes"}, "with_pieces"),
    ("/tokenize", {"content": {"a": 1}}, "content"),
    ("/tokenize", ["content"], "JSON object"),
    ("/detokenize", {"tokens": [1, 2, 1 << 40]}, "not in the model's vocabulary"),
    ("/detokenize", {"tokens": [True]}, "tokens"),
    ("/detokenize", {"tokens": "abc"}, "tokens"),
    ("/detokenize", {"tokens": [0] * (limits.MAX_TOKEN_IDS + 1)}, "MAX_TOKEN_IDS"),
    ("/detokenize", {"tokens": [[[[0]]]]}, "tokens"),
    ("/apply-template", {"messages": "hi"}, "messages"),
    ("/apply-template", {"messages": [{"role": "wizard", "content": "hi"}]}, "wizard"),
    ("/chat/completions/input_tokens", {"messages": [{"role": "user", "content": "\ud800"}]}, "lone surrogate"),
])
def test_a_hostile_body_is_a_400_in_llama_servers_shape(server, path, body, words) -> None:
    refused(server, path, body, words)


def test_a_body_that_is_not_json_is_a_400(server) -> None:
    with server.http() as http:
        answer = http.post("/tokenize", content=b"{not json")
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"

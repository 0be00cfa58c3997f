"""Tool calls through `spectui serve`, driven by the real `openai` client: a whole tool-call loop
(call, tool result, answer), streamed and not, on a tiny model carrying Qwen 2.5's real template.

The tiny model's weights are random: only the grammar built from the tools' schemas makes its
reply a call. A required call must come back as one at T 0 and T 0.8, with speculation on (the
draft's tokens are verified against the target's constrained distribution) and off. Also the two
cases where llama-server's behaviour is the reference: two assistant messages at the end (400),
and a streamed reply with `logprobs` (each chunk carries its own tokens', as
`test_logprobs_stream` in llama.cpp's tools/server/tests checks).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import openai
import pytest
import tiny_gguf
from serving import Served, served_at_home

QWEN25 = (Path(__file__).parent / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "required": ["city", "days"], "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
        "days": {"type": "integer", "enum": [1, 2, 3, 7]}}}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}
QUESTION = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]
TAGS = ("<tool_call>", "</tool_call>")
QWEN_SPEC = replace(tiny_gguf.TinySpec(), chat_template=QWEN25, tokens=(*tiny_gguf.vocabulary(), *TAGS),
                    user_defined=frozenset(TAGS))
"""Qwen 2.5's template, and its `<tool_call>` tags as single added tokens, as in Qwen's vocabulary."""
OPEN_ID = len(tiny_gguf.vocabulary())


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Served:
    pair = tiny_gguf.write_pair(tmp_path_factory.mktemp("qwen-template"), spec=QWEN_SPEC)
    home = tmp_path_factory.mktemp("home")
    with served_at_home(home, pair.target, pair.draft) as running:
        yield running


@pytest.fixture(scope="module")
def plain_server(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Served:
    home = tmp_path_factory.mktemp("home")
    with served_at_home(home, tiny_pair.target, tiny_pair.draft) as running:
        yield running


def ask(server: Served, messages: list[dict[str, object]], **fields: object):  # type: ignore[no-untyped-def]
    extra = {key: fields.pop(key) for key in ("k",) if key in fields}
    fields.setdefault("max_tokens", 120)
    return server.client().chat.completions.create(model="tiny", messages=messages, extra_body=extra or None,
                                                   **fields)


def check_weather_call(name: str, arguments: str) -> dict[str, object]:
    assert name == "get_weather"
    args = json.loads(arguments)
    assert args["city"] in ("Paris", "Tokyo", "Lima") and args["days"] in (1, 2, 3, 7)
    return args


@pytest.mark.parametrize(("temperature", "k", "seed"), [(0, 3, 1), (0.8, 3, 2), (0.8, "auto", 3), (0.8, 0, 4)])
def test_a_required_call_is_always_a_call_that_parses(tool_server, temperature, k, seed) -> None:
    reply = ask(tool_server, QUESTION, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                temperature=temperature, seed=seed, k=k)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    check_weather_call(call.function.name, call.function.arguments)


def test_greedy_required_call_is_the_same_with_and_without_speculation(tool_server) -> None:
    calls = [ask(tool_server, QUESTION, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                 temperature=0, k=k).choices[0].message.tool_calls[0].function for k in (0, 3)]
    assert calls[0].arguments == calls[1].arguments and calls[0].name == calls[1].name


def test_a_named_tool_choice_calls_that_tool(tool_server) -> None:
    reply = ask(tool_server, QUESTION, tools=[WEATHER, TIME], temperature=0.8, seed=5, parallel_tool_calls=False,
                tool_choice={"type": "function", "function": {"name": "get_time"}})
    [call] = reply.choices[0].message.tool_calls
    assert call.function.name == "get_time" and json.loads(call.function.arguments)["zone"] in ("UTC", "CET")


@pytest.mark.parametrize(("temperature", "k"), [(0, 3), (0.8, 3)])
def test_with_auto_a_call_once_opened_is_a_call_that_parses(tool_server, temperature, k) -> None:
    """`auto`: the grammar waits for `<tool_call>` (here pushed by a logit bias, as a random
    model rarely writes it), then holds: what follows the tag is a call to one of the tools."""
    reply = ask(tool_server, QUESTION, tools=[WEATHER], parallel_tool_calls=False, temperature=temperature,
                seed=3, k=k, logit_bias={str(OPEN_ID): 100})
    [call] = reply.choices[0].message.tool_calls
    check_weather_call(call.function.name, call.function.arguments)
    assert reply.choices[0].finish_reason == "tool_calls"


def test_with_auto_the_reply_is_free_until_a_call_opens(tool_server) -> None:
    # K fixed: under K = auto the sampled text depends on the host's timings (a busy machine once
    # sampled EOS early); either way the reply is text that ran on or ended, never a call.
    banned = ask(tool_server, QUESTION, tools=[WEATHER], temperature=0.8, seed=4, max_tokens=30,
                 logit_bias={str(OPEN_ID): -100}, k=3)
    choice = banned.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason in ("length", "stop")
    assert len(choice.message.content or "") > 0  # free text: the lazy grammar never woke


def test_the_openai_client_runs_a_whole_tool_loop(tool_server) -> None:
    first = ask(tool_server, QUESTION, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                temperature=0)
    message = first.choices[0].message
    call = message.tool_calls[0]
    args = check_weather_call(call.function.name, call.function.arguments)
    history = [*QUESTION, message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"city": args["city"], "sky": "sun"})}]
    answer = ask(tool_server, history, tools=[WEATHER], temperature=0, max_tokens=8)
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert answer.usage.prompt_tokens > first.usage.prompt_tokens  # the call and its result were in the prompt
    bare = ask(tool_server, QUESTION, tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=5)
    assert bare.choices[0].message.tool_calls is None  # none: no tools reach the template, no call is read


def test_the_openai_client_runs_a_streamed_tool_loop(tool_server) -> None:
    chunks = list(tool_server.client().chat.completions.create(
        model="tiny", messages=QUESTION, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
        temperature=0.8, seed=7, max_tokens=120, stream=True, extra_body={"k": 3}))
    deltas = [c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    first, *rest = [d[0] for d in deltas]
    assert first.index == 0 and first.id.startswith("call_") and first.type == "function"
    assert first.function.name == "get_weather" and first.function.arguments == ""
    assert rest and all(d.id is None and d.function.name is None and d.index == 0 for d in rest)
    arguments = "".join(d.function.arguments for d in rest)
    check_weather_call(first.function.name, arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    history = [*QUESTION, {"role": "assistant", "content": None, "tool_calls": [
        {"id": first.id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": first.id, "content": "sunny"}]
    answer = list(tool_server.client().chat.completions.create(
        model="tiny", messages=history, tools=[WEATHER], temperature=0, max_tokens=10, stream=True))
    assert answer[-1].choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_a_template_without_tool_syntax_is_refused_naming_it(plain_server) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        ask(plain_server, QUESTION, tools=[WEATHER])
    message = refused.value.body["message"]  # type: ignore[index]
    assert "chat template of" in message and "no tool-call syntax" in message and "target" in message


@pytest.mark.parametrize(("fields", "words"), [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "'nope'"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {}}]}, "function.name"),
    ({"tools": [WEATHER] * 200}, "the most"),
    ({"tools": [WEATHER], "grammar": "root ::= \"x\""}, "Cannot use custom grammar constraints with tools."),
])
def test_bad_tool_requests_are_one_line_400s(tool_server, fields, words) -> None:
    with tool_server.http() as http:
        answer = http.post("/v1/chat/completions", json={"messages": QUESTION, **fields})
    assert answer.status_code == 400 and words in answer.json()["error"]["message"]


# ----- llama-server's behaviour where spectui differed -------------------------------------------------


def test_two_assistant_messages_at_the_end_are_refused_as_llama_server_does(plain_server) -> None:
    messages = [{"role": "user", "content": "test"}, {"role": "assistant", "content": "test"},
                {"role": "assistant", "content": "test"}]
    with plain_server.http() as http:
        answer = http.post("/v1/chat/completions", json={"messages": messages})
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "Cannot have 2 or more assistant messages at the end of the list."


@pytest.mark.parametrize("k", [0, 3])
def test_a_streamed_reply_with_logprobs_has_them_in_every_chunk_as_llama_server(plain_server, k) -> None:
    """llama.cpp's test_logprobs_stream, on the tiny model: after the role chunk, every chunk
    that is not the finish carries logprobs whose tokens spell exactly its content."""
    chunks = plain_server.client().chat.completions.create(
        model="tiny", temperature=0.0, max_tokens=24, logprobs=True, top_logprobs=10, stream=True,
        messages=[{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}],
        extra_body={"k": k})
    output, aggregated, seen = "", b"", 0
    for i, chunk in enumerate(chunks):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        if i == 0:
            assert choice.delta.content is None and choice.delta.role == "assistant"
            continue
        assert choice.delta.role is None
        if choice.finish_reason is None:
            output += choice.delta.content or ""
            assert choice.logprobs is not None and choice.logprobs.content is not None
            for token in choice.logprobs.content:
                aggregated += bytes(token.bytes)  # llama.cpp's test joins token.token: the same text
                # for its model's whole characters; a random model's bytes split characters
                seen += 1
                assert token.logprob <= 0.0 and token.bytes is not None and len(token.top_logprobs) > 0
    assert aggregated.decode("utf-8", errors="replace") == output and seen > 0


def test_plain_chat_through_httpx_is_unchanged_by_tools_code(plain_server) -> None:
    with plain_server.http() as http:
        answer = http.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 4, "tool_choice": "none"})
    assert answer.status_code == 200 and "tool_calls" not in answer.json()["choices"][0]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_by_max_tokens_finishes_as_length_as_llama_server(tool_server, stream) -> None:
    """llama-server's finish_reason is `length` whenever a reply hit its limit, a call or not
    (server-task.cpp): an agent told `tool_calls` would run a call whose arguments were cut (seen
    streamed with scripts/bench_agent.py)."""
    fields = {"tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False, "temperature": 0}
    whole = ask(tool_server, QUESTION, **fields)
    assert whole.choices[0].finish_reason == "tool_calls"
    cut = whole.usage.completion_tokens - 6  # past the name, inside the arguments
    if not stream:
        reply = ask(tool_server, QUESTION, max_tokens=cut, **fields)
        assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == cut
        return
    chunks = list(tool_server.client().chat.completions.create(
        model="tiny", messages=QUESTION, max_tokens=cut, stream=True, **fields))
    deltas = [d for c in chunks if c.choices and c.choices[0].delta.tool_calls for d in c.choices[0].delta.tool_calls]
    assert deltas and deltas[0].function.name == "get_weather"  # the call had begun
    arguments = "".join(d.function.arguments or "" for d in deltas)
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"

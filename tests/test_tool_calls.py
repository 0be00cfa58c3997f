"""Tool calls on the text side: each family's syntax found in its real chat template, calls read
from literal model outputs, tool messages rendered through the real templates, and a streamed
reply split into content and OpenAI's tool-call deltas (`spectui.chat.tool_calls`, `serve.tools`).
No model is loaded here; `tests/test_serve_tools.py` runs the same through `spectui serve`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spectui.chat.template import ChatFormat, ChatMessage, PromptStyle
from spectui.chat.tool_calls import SYNTAXES, tool_syntax
from spectui.chat.tool_parsers import ToolCall, ToolCallError

TEMPLATES = Path(__file__).parent / "templates"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


@pytest.mark.parametrize(("name", "family"), [
    ("Qwen-Qwen2.5-7B-Instruct", "hermes"), ("Qwen-Qwen3-0.6B", "hermes"), ("Qwen3.5-4B", "qwen-xml"),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3"), ("Mistral-Small-3.2-24B-Instruct-2506", "mistral"),
    ("mistralai-Mistral-Nemo-Instruct-2407", "mistral-list"), ("google-gemma-4-31B-it", "gemma4"),
    ("openai-gpt-oss-120b", "harmony"), ("LFM2-8B-A1B", "lfm2"),
])
def test_each_family_is_found_in_its_real_template(name, family) -> None:
    syntax = tool_syntax(template(name))
    assert syntax is not None and syntax.name == family


def test_a_template_without_tools_has_no_syntax() -> None:
    assert tool_syntax(template("google-gemma-2-2b-it")) is None  # Gemma 2 and 3: no tool syntax
    assert tool_syntax(None) is None
    import tiny_gguf

    assert tool_syntax(tiny_gguf.CHATML_TEMPLATE) is None  # SmolLM2's ChatML, the demo's


# ----- parsing literal outputs ----------------------------------------------------------------------

CASES = [
    ("hermes", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "Let me check.", [("get_weather", {"city": "Paris"})]),
    ("hermes", '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n'
               '{"name": "b", "arguments": "{\\"x\\": 1}"}\n</tool_call>', "", [("a", {}), ("b", {"x": 1})]),
    ("qwen-xml", "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
                 "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
     "", [("get_weather", {"city": "San Francisco", "days": 3})]),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [("get_weather", {"city": "Paris"})]),
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}}', "",
     [("get_weather", {"city": "Oslo"})]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', "", [("get_weather", {"city": "Paris"})]),
    ("mistral", 'Sure.[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Rome"}', "Sure.",
     [("get_weather", {"city": "Rome"})]),
    ("mistral-list", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abc123def"}]', "",
     [("get_weather", {"city": "Paris"})]),
    ("gemma4", '<|tool_call>call:get_weather{city:<|"|>Paris, France<|"|>,days:2}<tool_call|>', "",
     [("get_weather", {"city": "Paris, France", "days": 2})]),
    ("lfm2", '<|tool_call_start|>[get_weather(city="Paris", days=2)]<|tool_call_end|>Checking.', "Checking.",
     [("get_weather", {"city": "Paris", "days": 2})]),
    ("harmony", '<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary '
                'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}', "",
     [("get_weather", {"city": "Paris"})]),
]


@pytest.mark.parametrize(("family", "text", "content", "calls"), CASES)
def test_calls_are_read_from_each_familys_literal_output(family, text, content, calls) -> None:
    types = {"get_weather": {"city": "string", "days": "integer"}}
    parsed = SYNTAXES[family].parse(text, True, types)
    assert parsed.content == content
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == calls


@pytest.mark.parametrize("family", ["hermes", "llama3", "mistral", "gemma4", "lfm2"])
def test_plain_answers_have_no_calls(family) -> None:
    parsed = SYNTAXES[family].parse("The weather in Paris is mild.", True)
    assert parsed.calls == () and parsed.content == "The weather in Paris is mild."


def test_a_broken_call_is_an_error_and_an_unclosed_one_waits_in_a_stream() -> None:
    hermes = SYNTAXES["hermes"]
    with pytest.raises(ToolCallError):
        hermes.parse('<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>')
    waiting = hermes.parse('<tool_call>\n{"name": "get_weather", "argu', final=False)
    assert waiting.open and waiting.calls == ()


# ----- rendering tool messages through the real templates -------------------------------------------

CALL = {"id": "call0abcd", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
TURNS = (ChatMessage("user", "Weather in Paris?"), ChatMessage("assistant", "", tool_calls=(CALL,)),
         ChatMessage("tool", '{"temperature": 21}', tool_call_id="call0abcd", name="get_weather"))


@pytest.mark.parametrize(("name", "expected"), [
    ("Qwen-Qwen2.5-7B-Instruct", ['"name": "get_weather"', "<tool_call>", "<tool_response>\n{\"temperature\": 21}"]),
    ("Qwen-Qwen3-0.6B", ["<tool_call>", "<tool_response>"]),
    ("Qwen3.5-4B", ["<function=get_weather>", "<parameter=city>\nParis"]),
    ("meta-llama-Llama-3.1-8B-Instruct", ['"name": "get_weather"', "ipython"]),
    ("Mistral-Small-3.2-24B-Instruct-2506", ["[TOOL_CALLS]get_weather[CALL_ID]call0abcd[ARGS]", "[TOOL_RESULTS]"]),
    ("google-gemma-4-31B-it", ["<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>"]),
    ("openai-gpt-oss-120b", ["to=functions.get_weather", "get_weather"]),
])
def test_tools_and_tool_messages_render_through_the_real_template(name, expected) -> None:
    fmt = ChatFormat(template(name), bos_token="<s>", eos_token="</s>")
    text = fmt.render(TURNS, style=PromptStyle(tools=(WEATHER,)))
    assert "The weather in a city" in text or "get_weather" in text  # the tool reached the prompt
    for piece in expected:
        assert piece in text, piece


def test_without_tools_the_template_gets_no_tools_variable() -> None:
    fmt = ChatFormat(template("Qwen-Qwen2.5-7B-Instruct"))
    with_tools = fmt.render(TURNS[:1], style=PromptStyle(tools=(WEATHER,)))
    without = fmt.render(TURNS[:1], style=PromptStyle())
    assert "<tools>" in with_tools and "<tools>" not in without


# ----- streaming: content first, then each call as id+name, then its arguments -----------------------


def stream(family: str, pieces: list[str], types: dict[str, dict[str, str]] | None = None):  # type: ignore[no-untyped-def]
    from spectui.serve.tool_grammar import Function
    from spectui.serve.tools import ToolPlan, ToolStream

    plan = ToolPlan(SYNTAXES[family], (WEATHER,), (Function("get_weather", {}),), False, True, types or {})
    tool_stream = ToolStream(plan)
    content, deltas = "", []
    for piece in pieces:
        text, new = tool_stream.feed(piece)
        content, deltas = content + text, deltas + new
        yield text, new
    text, new = tool_stream.finish()
    yield text, new


def test_a_streamed_call_is_held_back_then_sent_as_openai_deltas() -> None:
    pieces = ["Let me", " check. <tool", "_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": ",
              "\"Par", "is\"}}", "\n</tool_call>", "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}"]
    steps = list(stream("hermes", pieces))
    assert [s[0] for s in steps] == ["Let me", " check. ", "", "", "", "", "", "", ""]  # "<tool" was held back
    deltas = [d for _text, new in steps for d in new]
    assert deltas[0]["index"] == 0 and deltas[0]["type"] == "function" and deltas[0]["id"].startswith("call_")
    assert deltas[0]["function"] == {"name": "get_weather", "arguments": ""} and not steps[2][1]
    first = [d["function"]["arguments"] for d in deltas[1:] if d["index"] == 0]
    assert all("id" not in d and "name" not in d["function"] for d in deltas[1:] if d["index"] == 0)
    assert first == ['{"city": ', '"Par', 'is"}']  # the arguments as the model wrote them
    second = [d for d in deltas if d["index"] == 1]  # the next call, closed by the end of the reply
    assert second[0]["function"]["name"] == "get_weather" and second[0]["id"] != deltas[0]["id"]
    assert "".join(d["function"]["arguments"] for d in second) == "{}"


def test_text_that_only_looked_like_a_call_is_sent_as_content() -> None:
    steps = list(stream("hermes", ["a <tool", "box> b"]))
    assert "".join(s[0] for s in steps) == "a <toolbox> b" and not any(s[1] for s in steps)
    steps = list(stream("hermes", ["<tool_call>\nnot json\n</tool_call>"]))
    assert "".join(s[0] for s in steps) == "<tool_call>\nnot json\n</tool_call>"


def test_mistral_ids_fit_its_template() -> None:
    from spectui.serve.tool_grammar import Function
    from spectui.serve.tools import ToolPlan

    plan = ToolPlan(SYNTAXES["mistral"], (WEATHER,), (Function("get_weather", {}),), False, True)
    assert len(plan.new_id()) == 9 and plan.new_id().isalnum()
    assert ToolCall("a", "{}") != ToolCall("a", "{}", "x")

"""Chat templates: GGUF metadata rendered in a sandbox, completion mode for base models, the plain
frame on request, prompt tokens."""

from __future__ import annotations

import pytest

from spectui.chat.template import ChatFormat, ChatMessage, ChatTemplateError, encode_prompt
from spectui.engine.model.llama_model import LlamaModel

CONVERSATION = [
    ChatMessage("system", "Be brief."),
    ChatMessage("user", "Hi"),
    ChatMessage("assistant", "Hello!"),
    ChatMessage("user", "Name a colour."),
]
LLAMA3_STYLE = (
    "{{- bos_token }}\n"
    "{%- for message in messages %}\n"
    "    {%- if message['role'] == 'tool' %}{% continue %}{% endif %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}\n"
    "    {{- message['content'] | trim + '<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def vocab_model(tiny_pair):
    with LlamaModel.load(tiny_pair.target, vocab_only=True) as model:
        yield model


def test_chatml_template_from_gguf_metadata_renders_the_conversation(vocab_model) -> None:
    chat_format = ChatFormat.from_model(vocab_model)
    assert chat_format.mode == "chat" and not chat_format.is_completion
    text = chat_format.render(CONVERSATION)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert chat_format.bos_token == "<s>"
    assert chat_format.eos_token == "</s>"


def test_prompt_tokens_parse_control_tokens(vocab_model) -> None:
    text = ChatFormat.from_model(vocab_model).render(CONVERSATION[1:2])
    tokens = encode_prompt(vocab_model, text)
    assert tokens[0] == 2  # <|im_start|> as one control token, not its characters
    assert tokens.count(3) == 1  # one <|im_end|>
    assert vocab_model.detokenize(tokens).endswith("assistant\n")


class FakeBosTokenizer:
    """Only the flags `encode_prompt` reads; tokenizing maps characters to code points."""

    add_bos = True
    bos_id = 0

    def tokenize(self, text: str, **_flags: bool) -> list[int]:
        return [0 if ch == "^" else ord(ch) for ch in text]


def test_bos_is_added_once_when_the_model_wants_it() -> None:
    assert encode_prompt(FakeBosTokenizer(), "ab") == [0, ord("a"), ord("b")]
    assert encode_prompt(FakeBosTokenizer(), "^ab") == [0, ord("a"), ord("b")]


def test_hugging_face_template_features_work() -> None:
    chat_format = ChatFormat(LLAMA3_STYLE, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    text = chat_format.render([ChatMessage("user", "  Hi  "), ChatMessage("tool", "x")])
    assert text == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )


def test_helpers_hugging_face_templates_call() -> None:
    dated = ChatFormat("{{ strftime_now('%Y') }}|{{ messages | tojson }}")
    year, dumped = dated.render([ChatMessage("user", "café")]).split("|", 1)
    assert year.isdigit() and len(year) == 4
    assert dumped == '[{"role": "user", "content": "café"}]'
    refusing = ChatFormat("{{ raise_exception('System role not supported') }}")
    with pytest.raises(ChatTemplateError, match="System role not supported"):
        refusing.render(CONVERSATION)


def test_templates_are_sandboxed() -> None:
    mutating = ChatFormat("{{ messages.append(1) }}")
    with pytest.raises(ChatTemplateError):
        mutating.render(CONVERSATION)
    escaping = ChatFormat("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateError):
        escaping.render(CONVERSATION)


def test_a_model_without_template_continues_the_text() -> None:
    """Completion mode: no User/Assistant frame, the turns run on as one text, no stop strings."""
    chat_format = ChatFormat(None, mode="completion")
    assert chat_format.is_completion and "continues your text" in chat_format.description
    turns = [ChatMessage("user", "Once upon a time"), ChatMessage("assistant", " there was a fox."),
             ChatMessage("user", "Then winter came")]
    assert chat_format.render(turns[:1]) == "Once upon a time"
    assert chat_format.render(turns) == "Once upon a time there was a fox.\nThen winter came"
    with_system = [ChatMessage("system", "A fairy tale."), *turns[:1]]
    assert chat_format.render(with_system) == "A fairy tale.\n\nOnce upon a time"
    assert chat_format.stop_strings == ()


def test_the_mode_follows_the_template_unless_asked_otherwise() -> None:
    class Model:
        def __init__(self, template):
            self.chat_template, self.bos_id, self.eos_id = template, -1, -1

        def token_text(self, token: int) -> str:
            return ""

    assert ChatFormat.from_model(Model(None)).mode == "completion"
    assert ChatFormat.from_model(Model(None), "chat").mode == "plain-chat"
    assert ChatFormat.from_model(Model("{{ messages }}")).mode == "chat"
    assert ChatFormat.from_model(Model("{{ messages }}"), "completion").mode == "completion"


def test_the_plain_frame_for_a_chat_model_without_template() -> None:
    chat_format = ChatFormat(None, mode="plain-chat")
    assert "plain" in chat_format.description
    assert chat_format.render(CONVERSATION[:2]) == "System: Be brief.\n\nUser: Hi\n\nAssistant:"
    assert {"\nUser:", "\nAssistant:", "\nSystem:"} <= set(chat_format.stop_strings)

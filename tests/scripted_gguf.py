"""Tiny real GGUF models that write a known text: a reasoning model's reply, for the chat tests.

The network is `tiny_gguf`'s llama, but its layers add nothing to the residual stream (their
output projections are zero), so the next token depends only on the current one: a bigram model.
Each token of the script gets its own embedding direction and the output head maps it to the
next token of the script with a large margin, so greedy decoding (and sampling, in practice)
writes the script after the prompt's last token (a newline for ChatML-style prompts), then EOS.
llama.cpp loads, tokenizes, templates and decodes these exactly as it would a downloaded model;
the draft (the first layer) is the same bigram model, so every proposal is accepted.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import tiny_gguf

NEWLINE = tiny_gguf.bytes_to_unicode()[ord("\n")]
MARGIN = 4.0
"""Output weight on the next token: its logit is MARGIN * sqrt(n_embd) (32) against 0 for others."""

THINKING_SCRIPT = ("<think>", "Let", " me", " count", ".", "</think>", "\n\n", "Four", " gears", "!")
"""A reasoning reply: `<think>Let me count.</think>\\n\\nFour gears!`."""
OPENED_SCRIPT = THINKING_SCRIPT[1:]
"""The same reply for a template that opens the reasoning block in the prompt itself."""

QWEN3_LIKE_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- set ns = namespace(multi_step=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step and message.role == 'user' %}"
    "{%- set ns.multi_step = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}{%- set content = message.content %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is string %}{%- set reasoning_content = message.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index and reasoning_content %}"
    "{{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n'"
    " + content.lstrip('\\n') }}"
    "{%- else %}{{- '<|im_start|>assistant\\n' + content }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
"""Qwen3's handling of reasoning, trimmed of tools: `reasoning_content` (or think tags inside the
content) is rendered only for replies after the last user question, so earlier turns go back
without it; `enable_thinking=false` writes an empty think block into the generation prompt."""

KEEPING_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.reasoning_content %}{{- '<think>' + message.reasoning_content + '</think>' }}{%- endif %}"
    "{{- message.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""A template that sends every earlier reply's reasoning back (some models are trained so)."""

OPENING_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)
"""A template whose generation prompt opens the think block (DeepSeek-R1 style)."""


def encoded(text: str) -> str:
    """`text` as a byte-level BPE token's text (GPT-2's byte-to-character map)."""
    table = tiny_gguf.bytes_to_unicode()
    return "".join(table[b] for b in text.encode("utf-8"))


def scripted_spec(script: tuple[str, ...], template: str) -> tuple[tiny_gguf.TinySpec, list[int]]:
    """The spec (vocabulary plus the script's words as tokens) and the script's token ids,
    starting with the newline that ends the prompt."""
    vocab = list(tiny_gguf.vocabulary())
    chain = [vocab.index(NEWLINE)]
    for word in script:
        token = encoded(word)
        if token not in vocab:
            vocab.append(token)
        chain.append(vocab.index(token))
    if len(set(chain)) != len(chain):
        raise ValueError("every token of a script must be distinct (the model is a bigram model)")
    return replace(tiny_gguf.TinySpec(), tokens=tuple(vocab), chat_template=template), chain


def scripted_weights(spec: tiny_gguf.TinySpec, chain: list[int], seed: int = 7) -> dict[str, np.ndarray]:
    if len(chain) > spec.n_embd:
        raise ValueError(f"a script of at most {spec.n_embd - 1} tokens")
    weights = tiny_gguf.random_weights(spec, seed)
    for name in list(weights):
        if name.endswith(("attn_output.weight", "ffn_down.weight")):
            weights[name] = np.zeros_like(weights[name])  # layers add nothing: a bigram model
    embed = weights["token_embd.weight"] * 0.01
    head = np.zeros_like(weights["output.weight"])
    for position, token in enumerate(chain):
        embed[token] = 0.0
        embed[token, position] = 1.0
        following = chain[position + 1] if position + 1 < len(chain) else spec.eos_id
        head[following, position] = MARGIN
    weights["token_embd.weight"], weights["output.weight"] = embed, head
    return weights


def write_scripted_pair(directory: Path, script: tuple[str, ...] = THINKING_SCRIPT,
                        template: str = QWEN3_LIKE_TEMPLATE) -> tiny_gguf.TinyPair:
    """A target and its one-layer draft that answer any ChatML prompt with `script`."""
    spec, chain = scripted_spec(script, template)
    weights = scripted_weights(spec, chain)
    directory.mkdir(parents=True, exist_ok=True)
    target = tiny_gguf.write_gguf(directory / "target.gguf", spec, weights, "scripted-target")
    draft_spec = replace(spec, n_layer=1)
    draft = tiny_gguf.write_gguf(directory / "draft.gguf", draft_spec, tiny_gguf.derive_draft(weights, 1),
                                 "scripted-draft")
    return tiny_gguf.TinyPair(target=target, draft=draft)

"""The grammars that make a required reply a call, in each family's syntax: llama.cpp's grammar
sampler (over a real vocabulary, the tiny model's) takes a call the family's parser reads, token
by token, and refuses text that is not a call or names another function."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tiny_gguf

from spectui.chat.tool_calls import SYNTAXES
from spectui.serve.tool_grammar import CONSTRAINED, Function, call_grammar

PARAMS = {"type": "object", "required": ["city"],
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
FUNCTIONS = [Function("get_weather", PARAMS), Function("get_time", {"type": "object", "properties": {}})]
CALLS = {
    "hermes": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
    "qwen-xml": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
    "llama3": '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}',
    "mistral": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}',
    "mistral-list": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]',
    "gemma4": '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>',
}


@pytest.fixture(scope="module")
def vocab(tiny_pair):  # type: ignore[no-untyped-def]
    from spectui.engine.model.llama_model import LlamaModel

    model = LlamaModel.load(tiny_pair.target, vocab_only=True)
    yield model
    model.close()


def accepts(model, gbnf: str, text: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether the grammar lets `text` through, token by token, and then allows the end."""
    from spectui.engine.step.grammar import Grammar

    grammar = Grammar.compile(model, gbnf)
    try:
        for token in model.tokenize(text, add_special=False, parse_special=False):
            if not grammar.allowed(np.array([token]))[0]:
                return False
            grammar.accept(token)
        return bool(grammar.allowed(np.array([model.eos_id]))[0])
    finally:
        grammar.close()


def test_every_constrained_family_has_a_literal_call() -> None:
    assert set(CALLS) == set(CONSTRAINED)


@pytest.mark.parametrize("family", sorted(CALLS))
def test_the_grammar_takes_a_call_the_parser_reads(vocab, family) -> None:
    gbnf = call_grammar(SYNTAXES[family], FUNCTIONS, parallel=False)
    assert gbnf is not None
    assert accepts(vocab, gbnf, CALLS[family])
    [call] = SYNTAXES[family].parse(CALLS[family], True, {"get_weather": {"city": "string", "days": "integer"}}).calls
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris", "days": 3}


@pytest.mark.parametrize("family", sorted(CALLS))
def test_the_grammar_refuses_plain_text_and_unknown_functions(vocab, family) -> None:
    gbnf = call_grammar(SYNTAXES[family], FUNCTIONS, parallel=False)
    assert gbnf is not None
    assert not accepts(vocab, gbnf, "The weather is fine.")
    assert not accepts(vocab, gbnf, CALLS[family].replace("get_weather", "get_wether"))
    named = call_grammar(SYNTAXES[family], FUNCTIONS[1:], parallel=False)  # tool_choice names get_time
    assert named is not None and not accepts(vocab, named, CALLS[family])


def test_json_families_check_the_arguments_against_the_schema(vocab) -> None:
    gbnf = call_grammar(SYNTAXES["hermes"], FUNCTIONS, parallel=False)
    assert gbnf is not None
    missing = '<tool_call>\n{"name": "get_weather", "arguments": {"days": 3}}\n</tool_call>'
    wrong_type = '<tool_call>\n{"name": "get_weather", "arguments": {"city": 7}}\n</tool_call>'
    assert not accepts(vocab, gbnf, missing) and not accepts(vocab, gbnf, wrong_type)


def test_parallel_calls_and_a_thinking_block_first(vocab) -> None:
    two = CALLS["hermes"] + "\n" + CALLS["hermes"]
    assert accepts(vocab, call_grammar(SYNTAXES["hermes"], FUNCTIONS, parallel=True) or "", two)
    assert not accepts(vocab, call_grammar(SYNTAXES["hermes"], FUNCTIONS, parallel=False) or "", two)
    thinking = call_grammar(SYNTAXES["hermes"], FUNCTIONS, parallel=False, thinking="optional") or ""
    assert accepts(vocab, thinking, "<think>\nThe user wants <b>weather</b>.\n</think>\n\n" + CALLS["hermes"])
    assert accepts(vocab, thinking, CALLS["hermes"])
    opened = call_grammar(SYNTAXES["hermes"], FUNCTIONS, parallel=False, thinking="open") or ""
    assert accepts(vocab, opened, "Weather, then.\n</think>\n" + CALLS["hermes"])


def test_families_read_but_not_constrained_have_no_grammar() -> None:
    for family in ("lfm2", "harmony"):
        assert call_grammar(SYNTAXES[family], FUNCTIONS, parallel=False) is None


def test_a_control_token_a_call_needs_is_shown_only_when_asked(tiny_pair) -> None:
    """llama.cpp renders a control token as nothing; a reply that may call a tool shows the
    family's control-token markers (`[TOOL_CALLS]`...) as text, as llama-server's preserved tokens."""
    from spectui.engine.events import Finished
    from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
    from spectui.engine.generator import load_generator

    generator = load_generator(tiny_pair.target, None, n_ctx=512, n_threads=2)
    try:
        prompt = generator.target.tokenize("Hello", add_special=False)
        forced = SamplingConfig(temperature=0, logit_bias=((tiny_gguf.IM_START_ID, 100.0),))
        texts = []
        for shown in (frozenset(), frozenset({tiny_gguf.IM_START_ID})):
            config = GenerationConfig(max_tokens=2, sampling=forced, shown_tokens=shown)
            [done] = [e for e in generator.generate(prompt, config, DraftControl(0)) if isinstance(e, Finished)]
            assert list(done.tokens) == [tiny_gguf.IM_START_ID] * 2
            texts.append(done.text)
        assert texts == ["", "<|im_start|><|im_start|>"]
    finally:
        generator.close()


# ----- a lazy grammar (tool_choice auto): asleep until its trigger, then a call ---------------------


def test_a_lazy_grammar_allows_everything_until_its_trigger_then_only_the_call(tmp_path) -> None:
    from dataclasses import replace

    from spectui.engine.model.llama_model import LlamaModel
    from spectui.engine.step.grammar import Grammar

    tags = ("<tool_call>", "</tool_call>")
    spec = replace(tiny_gguf.TinySpec(), tokens=(*tiny_gguf.vocabulary(), *tags), user_defined=frozenset(tags))
    path = tiny_gguf.write_model(tmp_path / "tagged.gguf", spec)
    with LlamaModel.load(path, vocab_only=True) as model:
        [trigger] = model.tokenize("<tool_call>", add_special=False, parse_special=True)
        gbnf = call_grammar(SYNTAXES["hermes"], FUNCTIONS, parallel=False) or ""
        grammar = Grammar.compile(model, gbnf, triggers=(trigger,))
        every = np.arange(model.n_vocab)
        try:
            free = model.tokenize("Let me look. ", add_special=False, parse_special=False)
            for token in free:
                assert grammar.allowed(every).all() and grammar.sleeps_through([token, model.eos_id])
                grammar.accept(token)
            assert not grammar.sleeps_through([trigger])
            fork = grammar.fork()
            grammar.accept(trigger)  # awake: only the call from here
            assert not grammar.sleeps_through([]) and fork.sleeps_through([])  # the fork stayed asleep
            fork.close()
            assert grammar.allowed(every).sum() == 1  # "\n" after the tag
            rest = CALLS["hermes"].removeprefix("<tool_call>")
            for token in model.tokenize(rest, add_special=False, parse_special=True):
                assert grammar.allowed(np.array([token]))[0]
                grammar.accept(token)
            assert grammar.allowed(np.array([model.eos_id]))[0]
        finally:
            grammar.close()


def test_trees_stay_under_a_sleeping_lazy_grammar_and_greedy_output_is_the_targets(tiny_pair) -> None:
    """A lazy grammar no node of a tree wakes allows every token at every node: the tree is
    verified as without it (K = auto's trees keep paying on agent requests), and the grammar
    follows the accepted path."""
    from dataclasses import replace

    from lossless import GREEDY, greedy_continuation
    from tree_budget import TreeBudget

    from spectui.engine.generator import load_generator
    from spectui.engine.step import speculative
    from spectui.engine.step.grammar import Grammar

    generator = load_generator(tiny_pair.target, tiny_pair.draft, n_ctx=512, n_threads=1)
    try:
        prompt = generator.target.tokenize("Hello there, what is in the")
        truth = greedy_continuation(tiny_pair.target, prompt, 40)
        letters = [generator.target.tokenize(c, add_special=False) for c in "QZXJKqzxjkVW"]
        trigger, text = next((t[0], c) for t, c in zip(letters, "QZXJKqzxjkVW", strict=True)
                             if len(t) == 1 and t[0] not in truth)  # a letter the reply never writes
        grammar = Grammar.compile(generator.target, f"root ::= {json.dumps(text)} [a-z]*", triggers=(trigger,))
        cfg = replace(GREEDY, constraint=grammar)
        generator.reset()
        context = list(prompt)
        generator.target.sync(context[:-1])
        drafter = generator.drafter("model")
        drafter.prefill(context[:-1])
        rng, trees = np.random.default_rng(0), 0
        while len(context) - len(prompt) < 32:
            step = speculative.speculative_step(generator.target, drafter, context, TreeBudget(4, row_value=0.02),
                                                cfg, rng)
            trees += step.proposal.is_tree
            context.extend(step.tokens)
        assert context[len(prompt):len(prompt) + 32] == truth[:32]
        assert trees > 3, "no tree was verified: the test proves nothing"
        assert grammar.sleeps_through([])
        grammar.close()
    finally:
        generator.close()

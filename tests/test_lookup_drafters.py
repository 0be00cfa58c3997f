"""The draftless drafters (`ngram`, `suffix`), alone and chained before the draft model, on the real
tiny models: greedy output identical to the target's, exact sampling (chi-square), K = auto's
figures kept per member, learning from past chats, and the bench's per-member breakdown.

The tiny random target loops quickly at T = 0: a prompt that ends inside such a loop ("loop"
prompts) holds its own continuation and makes the lookups hit from the first cycle; a short
prompt gives them nothing to find until the reply repeats itself. The ungated drafters propose
every match they find, so rejections and rollbacks after a lookup are exercised too.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
from lossless import N_STEPS, PURE, DrawnFrom, chi_square_pvalue, exact_distribution
from numerics import GreedyReference
from textual.widgets import Static
from ui_harness import SIZE, GatedApp, RecordingApp, figures_text, held, options, ready, run_async, send, shown, until

from spectui.chat.store import ChatStore
from spectui.chat.template import ChatFormat, ChatMessage
from spectui.cli import main
from spectui.engine.drafters import DrafterSpec
from spectui.engine.drafters.chain import Behind, Lookup
from spectui.engine.drafters.lookup_gate import Calibration
from spectui.engine.drafters.ngram import NgramDrafter
from spectui.engine.drafters.suffix import SuffixDrafter
from spectui.engine.events import Finished, Progress
from spectui.engine.generation_config import AUTO, DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import Generator, load_generator
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.planning import autodraft
from spectui.engine.planning import figures as drafter_figures
from spectui.engine.step import speculative
from spectui.engine.step.drafter import FixedBudget
from spectui.limits import MAX_DRAFT, MAX_LOOKUP_DRAFT
from spectui.paths import chats_db_path
from spectui.session.history import store_history
from spectui.ui.chat_view import AssistantMessage
from spectui.ui.chat_view import shown as on_screen

KINDS = ["ngram", "suffix", "model+ngram", "model+suffix"]
LOOKUPS = ("ngram", "suffix")
GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def gen(tiny_pair) -> Generator:
    generator = load_generator(tiny_pair.target, DrafterSpec(draft=tiny_pair.draft), n_ctx=1024)
    yield generator
    generator.close()


@pytest.fixture(scope="module")
def ungated(gen) -> Generator:
    """The same target and draft model, with lookups that propose every match they find."""
    return Generator(gen.target, {"model": gen.drafters["model"], "ngram": NgramDrafter(gated=False),
                                  "suffix": SuffixDrafter(gated=False)})


def reply(gen: Generator, prompt: list[int], k, kind: str | None = None, max_tokens: int = 48,
          sampling: SamplingConfig = GREEDY) -> Finished:
    gen.reset()
    config = GenerationConfig(max_tokens=max_tokens, sampling=sampling)
    final = list(gen.generate(prompt, config, DraftControl(k, drafter=kind)))[-1]
    assert isinstance(final, Finished)
    return final


def loop_prompt(gen: Generator, text: str, m: int = 48) -> list[int]:
    """`text` and the first `m` tokens of the target's greedy reply to it: the reply goes on from
    there, and the tiny target has fallen into a loop by then, so its continuation is in the prompt."""
    tokens = gen.target.tokenize(text)
    return [*tokens, *reply(gen, tokens, 0, max_tokens=m).tokens]


def lookup_counts(final: Finished) -> tuple[int, int]:
    """(proposed, accepted) by the lookups of a reply."""
    mine = [final.stats.by_source[s] for s in LOOKUPS if s in final.stats.by_source]
    return sum(t.proposed for t in mine), sum(t.accepted for t in mine)


# ----- greedy: exactly the target's output ----------------------------------------------------


@pytest.mark.parametrize("which,text,loop", [
    ("gated", "Tell me about the wind", True), ("gated", "The story of the wind", False),
    ("ungated", "The story of the wind", True), ("ungated", "x", False),
], ids=["gated-loop", "gated-story", "ungated-loop", "ungated-x"])
def test_greedy_output_is_the_targets_for_every_lookup_kind_and_k(gen, ungated, which, text, loop):
    generator = gen if which == "gated" else ungated
    prompt = loop_prompt(gen, text) if loop else gen.target.tokenize(text)
    baseline = GreedyReference(generator.target, prompt, lambda: reply(generator, prompt, 0), label=f"{which} {text!r}")
    assert len(baseline.tokens) >= 16
    proposed = accepted = 0
    for kind in KINDS:
        for k in [1, 2, 3, 4, 5, 6, 7, 8, AUTO]:  # the same reply, or a GPU's near-tie
            final = baseline.check(lambda kind=kind, k=k: reply(generator, prompt, k, kind), label=f"{kind} K={k}")
            assert set(final.stats.by_source) <= set(kind.split("+"))
            mine = lookup_counts(final)
            proposed, accepted = proposed + mine[0], accepted + mine[1]
    assert accepted > 0  # the lookups hit: the tiny target loops, and loop prompts hold the reply
    if not loop:
        assert proposed > accepted  # and missed: rejected lookup tokens were rolled back


def test_a_loop_in_the_prompt_is_proposed_by_the_lookups_from_the_first_cycle(gen):
    prompt = loop_prompt(gen, "Tell me about the wind", 45)
    for kind in LOOKUPS:
        config = GenerationConfig(max_tokens=24, sampling=GREEDY)
        events = list(gen.generate(prompt, config, DraftControl(8, drafter=kind)))
        first = next(e.cycle for e in events if isinstance(e, Progress))
        assert first.source == kind and first.accepted >= 4, kind
        final = events[-1]
        assert final.stats.by_source[kind].accepted >= 16 and final.stats.target_passes <= 6, kind
        gen.reset()


# ----- sampling: exactly the target's distribution ---------------------------------------------


def lookup_context(tiny_pair, target: LlamaModel, make_drafter) -> tuple[list[int], list[int]]:
    """A context "c d c" whose lookup proposes d (then more), where the target is unsure of d.

    Returns the context and the drafter's proposal for it.
    """
    for text in ("in the", "Hello there, what is in the", "of the"):
        c = target.tokenize(text)
        after_c = exact_distribution(tiny_pair, c, PURE)
        for d in [int(t) for t in after_c.ids[np.argsort(after_c.probs)[::-1]][:4]]:
            context = [*c, d, *c]
            p = exact_distribution(tiny_pair, context, PURE).prob(d)
            if 0.15 <= p <= 0.85:
                proposal = make_drafter().propose(context, FixedBudget(2), PURE, np.random.default_rng(0))
                assert proposal.tokens[:1] == [d] and proposal.work == 0
                return context, proposal.tokens
    raise AssertionError("precondition: no context where the target is unsure of the looked-up token")


def lookup_samples(target: LlamaModel, context: list[int], make_drafter,
                   n_steps: int) -> tuple[list[list[int]], Counter, DrawnFrom]:
    drafter = make_drafter()
    target.reset()
    target.sync(context[:-1])
    rng = np.random.default_rng(11)
    outputs, kinds = [], Counter()
    drawn = DrawnFrom(target, context)
    for _ in range(n_steps):
        step = drawn.step(lambda: speculative.speculative_step(target, drafter, context, FixedBudget(2), PURE, rng))
        outputs.append(step.tokens)
        kinds["accepted_first"] += step.accepted >= 1
        kinds["resampled_first"] += step.drafted > 0 and step.accepted == 0
    return outputs, kinds, drawn


def check_lookup_lossless(tiny_pair, gen, make_drafter, n_steps: int = N_STEPS) -> tuple[float, float, Counter]:
    context, proposal = lookup_context(tiny_pair, gen.target, make_drafter)
    outputs, kinds, drawn = lookup_samples(gen.target, context, make_drafter, n_steps)
    p_first = chi_square_pvalue([out[0] for out in outputs], drawn.expected(tiny_pair, PURE))
    second = [out[1] for out in outputs if out[0] == proposal[0] and len(out) > 1]
    p_second = chi_square_pvalue(second, drawn.expected(tiny_pair, PURE, (proposal[0],)))
    gen.reset()
    return p_first, p_second, kinds


MAKERS = {"ngram": lambda: NgramDrafter(gated=False), "suffix": lambda: SuffixDrafter(gated=False)}


@pytest.mark.parametrize("kind", LOOKUPS)
def test_lookup_proposals_keep_the_target_distribution_at_t1(tiny_pair, gen, kind):
    p_first, p_second, kinds = check_lookup_lossless(tiny_pair, gen, MAKERS[kind])
    assert kinds["accepted_first"] > N_STEPS * 0.1 and kinds["resampled_first"] > N_STEPS * 0.1
    assert p_first > 0.001, f"first token does not follow the target's distribution (p={p_first:.2g})"
    assert p_second > 0.001, f"second token does not follow the target's distribution (p={p_second:.2g})"


@pytest.mark.parametrize("kind", LOOKUPS)
def test_the_check_catches_accepting_lookup_tokens_unconditionally(tiny_pair, gen, kind, monkeypatch):
    monkeypatch.setattr(speculative, "accept_draft_token", lambda p_d, q_d, u: True)
    p_first, _, kinds = check_lookup_lossless(tiny_pair, gen, MAKERS[kind], n_steps=1000)
    assert kinds["resampled_first"] == 0
    assert p_first < 1e-6


# ----- chains: the lookup when confident, else the draft model; K = auto prices each ------------


def test_a_chain_lets_the_lookup_propose_when_it_matches_and_the_model_otherwise(gen):
    """A fresh lookup, judged by its prior alone, leaves the first cycles to the draft model; the
    loop it then sees confirmed every cycle makes it take over."""
    prompt = loop_prompt(gen, "Tell me about the wind", 45)
    for kind in ("model+ngram", "model+suffix"):
        lookup = kind.split("+")[1]
        gen.drafters[lookup].calibration = Calibration()  # fresh: what earlier tests taught it is gone
        events = list(gen.generate(prompt, GenerationConfig(max_tokens=48, sampling=GREEDY),
                                   DraftControl(4, drafter=kind)))
        sources = [e.cycle.source for e in events if isinstance(e, Progress)]
        assert sources[0] == "model" and sources[-1] == lookup, kind
        assert events[-1].stats.by_source[lookup].accepted > events[-1].stats.by_source["model"].accepted
        gen.reset()


class StopAt:
    """A stand-in for a lookup ahead of the draft model: it would propose once the context ends
    with `token`, and records the context lengths it was asked about."""

    def __init__(self, token: int) -> None:
        self.token = token
        self.asked: list[int] = []

    def would_propose(self, context, budget, cfg) -> bool:
        self.asked.append(len(context))
        return context[-1] == self.token


def test_the_draft_model_stops_where_a_lookup_ahead_would_take_over(gen):
    model = gen.drafters["model"]
    context = gen.target.tokenize("The story of the wind")
    model.reset()
    free = model.propose(context, FixedBudget(6), GREEDY, np.random.default_rng(0)).tokens
    assert len(free) == 6
    i = next(i for i in range(1, 6) if free[i] not in free[:i])  # the first token not drafted before it
    lookup = StopAt(free[i])
    assert isinstance(lookup, Lookup)
    behind = Behind(FixedBudget(6), [lookup], "model", GREEDY)
    proposal = model.propose(context, behind, GREEDY, np.random.default_rng(0))
    assert proposal.tokens == free[:i + 1] and proposal.work == i + 1  # no forward pass after the hand-over
    assert lookup.asked == [len(context) + n for n in range(1, i + 2)]  # asked after each drafted token
    model.reset()


@pytest.mark.parametrize("m", [10, 20, 30])
def test_in_a_chain_the_lookup_goes_on_where_the_draft_model_handed_over(gen, m):
    """At a fixed K = 8 the draft model drafts 8 tokens unless it hands over; after a shorter
    model cycle that the target kept whole, the lookup proposes (unless the target's own token
    after the hand-over broke the match). The lookup first learns, over one reply, how far its
    matches hold: judged by its prior alone it is not trusted ahead of a draft model."""
    prompt = loop_prompt(gen, "Hello", m)
    baseline = GreedyReference(gen.target, prompt, lambda: reply(gen, prompt, 0, max_tokens=64), label=f"chain m={m}")
    for kind in ("model+ngram", "model+suffix"):
        lookup = kind.split("+")[1]
        gen.drafters[lookup].calibration = Calibration()
        reply(gen, prompt, 8, kind, max_tokens=64)  # the lookup learns how far to trust its matches
        events: list = []

        def chained(kind: str = kind, events: list = events) -> Finished:
            gen.reset()
            events[:] = gen.generate(prompt, GenerationConfig(max_tokens=64, sampling=GREEDY),
                                     DraftControl(8, drafter=kind))
            return events[-1]

        baseline.check(chained, label=kind)  # speculation-off's reply, or one that left it at a near-tie
        cycles = [e.cycle for e in events if isinstance(e, Progress)]
        handed = [after.source for cycle, after in pairwise(cycles)
                  if cycle.source == "model" and 0 < cycle.drafted == cycle.accepted < cycle.k]
        assert lookup in handed, kind


def test_k_auto_prices_each_member_of_a_chain_separately(gen):
    """K = auto learns from every cycle, at a fixed K too: at K = 8 both members of the chain are
    sure to propose (under K = auto whether they do is the guard's call on this host's wall
    times, which a busy CI machine once turned against the lookup for a whole reply)."""
    prompt = loop_prompt(gen, "The story of the wind")
    reply(gen, prompt, 8, "model+suffix", max_tokens=64)  # the lookup learns how far its matches hold
    final = reply(gen, prompt, 8, "model+suffix", max_tokens=64)
    assert final.stats.by_source["suffix"].proposed > 0 and final.stats.by_source["model"].proposed > 0
    auto = gen.auto(greedy=True)
    model, suffix = auto.of("model"), auto.of("suffix")
    assert model.measured and suffix.measured
    assert suffix.cost.x == 0.0 and model.cost.x > 0  # the lookup's calls did no work; the model's did
    assert suffix.trials[0] > 0 and model.trials[0] > 0
    assert suffix.acceptance != model.acceptance


# ----- learning from past chats ----------------------------------------------------------------


def test_a_past_chat_makes_the_suffix_drafter_propose(tiny_pair, tmp_path):
    question = "Tell me about the wind"
    plain = load_generator(tiny_pair.target, DrafterSpec(kind="suffix"), n_ctx=1024)
    try:
        fmt = ChatFormat.from_model(plain.target)
        prompt = fmt.prompt_tokens(plain.target, [ChatMessage("user", question)])
        answer = reply(plain, prompt, 0, max_tokens=40).text
        without = reply(plain, prompt, 8, "suffix", max_tokens=40)
    finally:
        plain.close()
    store = ChatStore(tmp_path / "chats.db")
    chat = store.new_chat()
    store.add_message(chat, "user", question)
    store.add_message(chat, "assistant", answer)
    history = store_history(store)
    store.close()
    learned = load_generator(tiny_pair.target, DrafterSpec(kind="suffix"), n_ctx=1024, history=history)
    try:
        assert "1 past chat" in learned.label("suffix")
        final = reply(learned, prompt, 8, "suffix", max_tokens=40)
    finally:
        learned.close()
    assert final.text == answer
    assert final.stats.by_source["suffix"].accepted >= lookup_counts(without)[1] + 10
    assert final.stats.target_passes < without.stats.target_passes


def test_a_short_match_proposes_twice_its_length_alone_and_eight_times_where_two_agree():
    # "1 2" matched (2 tokens: "9 1 2", "98 1 2" and "99 1 2" differ before them); 3..22 followed it.
    run = list(range(3, 23))
    once = SuffixDrafter().find([9, 1, 2, *run, 99, 1, 2], MAX_LOOKUP_DRAFT)
    assert once is not None and once.tokens == [3, 4, 5, 6]
    twice = SuffixDrafter().find([9, 1, 2, *run, 98, 1, 2, *run, 99, 1, 2], MAX_LOOKUP_DRAFT)
    assert twice is not None and twice.tokens == run[:16]


@pytest.fixture
def steady(tiny_pair, monkeypatch) -> Generator:
    """A fresh generator whose K = auto prices with a fixed cost model (a pass of n rows 10 ms +
    0.1 ms per row, a draft call 1 ms + 1 ms per forward pass) in place of the seconds this host
    measures: the gate's decisions then do not depend on how busy the machine is."""
    verify_add, draft_observe = autodraft.VerifyCosts.add, drafter_figures.DrafterFigures.observe
    monkeypatch.setattr(autodraft.VerifyCosts, "add",
                        lambda self, rows, _seconds: verify_add(self, rows, 0.010 + 0.0001 * rows))
    monkeypatch.setattr(drafter_figures.DrafterFigures, "observe", lambda self, step: draft_observe(
        self, replace(step, draft_seconds=0.001 + 0.001 * step.proposal.work)))
    generator = load_generator(tiny_pair.target, DrafterSpec(draft=tiny_pair.draft), n_ctx=1024)
    yield generator
    generator.close()


def test_under_k_auto_a_lookup_proposes_past_a_draft_models_longest_k(steady):
    gen = steady
    prompt = loop_prompt(gen, "Tell me about the wind", 64)
    baseline = reply(gen, prompt, 0, max_tokens=96)
    for kind in ("suffix", "model+suffix"):
        gen.reset()
        config = GenerationConfig(max_tokens=96, sampling=GREEDY)
        events = list(gen.generate(prompt, config, DraftControl(AUTO, drafter=kind)))
        drafted = [e.cycle.drafted for e in events if isinstance(e, Progress) and e.cycle.source == "suffix"]
        assert events[-1].tokens == baseline.tokens
        assert max(drafted) > MAX_DRAFT, f"{kind}: the lookup's proposals were {drafted}"
        assert max(drafted) <= MAX_LOOKUP_DRAFT


def test_another_chat_moves_the_conversation_into_the_history_once(gen):
    drafter = SuffixDrafter()
    first, second = list(range(100, 160)), list(range(300, 340))
    drafter.prefill(first)
    drafter.prefill([*first, 7, 8])  # the same chat, one more turn
    assert drafter.cache.history.sequences == 0
    drafter.prefill(second)  # another chat was opened
    assert drafter.cache.history.sequences == 1
    drafter.prefill([*first, 7, 8, 9])  # back to the first, grown: it replaces its earlier copy
    drafter.prefill(second)
    assert drafter.cache.history.sequences == 2
    drafter.reset()  # a reset (bench) forgets without learning
    drafter.prefill(first)
    assert drafter.cache.history.sequences == 2
    tokens = drafter.propose([5, 100, 101, 102, 103], FixedBudget(4), GREEDY, np.random.default_rng(0)).tokens
    assert tokens[:1] == [104]  # proposed from the history


# ----- bench: the combined drafter's per-member breakdown --------------------------------------


def test_bench_json_breaks_a_combined_drafter_down_per_member(tiny_pair, capsys):
    args = ["bench", "--target", str(tiny_pair.target), "--draft", str(tiny_pair.draft), "--drafter",
            "model+suffix", "--max-tokens", "64", "--prompt", "Tell me about gears.", "-k", "4", "--json"]
    assert main(args) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["drafter"] == "model+suffix" and row["identical"] is True
    assert "suffix lookup" in row["drafter_label"] and "draft model" in row["drafter_label"]
    members = row["by_drafter"]
    assert set(members) == {"model", "suffix"}
    for figures in members.values():
        assert figures["proposed"] >= figures["accepted"] > 0
    accepted = sum(f["accepted"] for f in members.values())
    proposed = sum(f["proposed"] for f in members.values())
    assert row["acceptance_rate"] == pytest.approx(accepted / proposed, abs=1e-4)


# ----- the chat app: the drafter key --------------------------------------------------------------


@pytest.fixture
def pair(tiny_pair, spectui_home):
    return tiny_pair


@run_async
async def test_the_drafter_key_switches_from_the_next_cycle_of_a_running_reply(pair) -> None:
    app = GatedApp(options(pair, drafter=DrafterSpec(kind="model", draft=pair.draft), max_tokens=64))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.pair.drafters.kinds == ("model", "ngram", "suffix", "model+ngram", "model+suffix")
        assert "draft model" in figures_text(app)
        await send(pilot, "Tell me about gears.", wait=False)
        await held(pilot)
        cycles_before = sum(len(u.cycles) for u in app.updates)
        await pilot.press("f7")
        assert app.pair.draft_control.drafter == "ngram"
        assert "n-gram lookup" in figures_text(app)
        app.release()
        await until(pilot, lambda: app.replies.busy is None, "the reply to finish")
        sources = [c.source for u in app.updates for c in u.cycles]
        assert set(sources[:cycles_before]) == {"model"}
        assert set(sources[cycles_before:]) == {"ngram"}  # the very next cycle, and every one after
        await pilot.press("f7", "f7", "f7")
        assert app.pair.draft_control.drafter == "model+suffix"
        assert "suffix lookup" in figures_text(app) and "draft model" in figures_text(app)
        await pilot.press("f6")
        legend = shown(app.query_one("#legend", Static))
        assert "draft model" in legend and "lookup" in legend
        coloured = app.query_one(AssistantMessage).coloured_text()
        for origin, style in (("model", "green"), ("ngram", "cyan")):  # each drafter's tokens, its colour
            painted = sum(span.end - span.start for span in coloured.spans if span.style == style)
            pieces = app.query_one(AssistantMessage).pieces  # shown with their controls escaped
            assert painted == sum(len(on_screen(text)) for text, o in pieces if o == origin) > 0


@run_async
async def test_the_app_hands_the_suffix_drafter_its_past_chats(pair) -> None:
    store = ChatStore(chats_db_path())
    chat = store.new_chat()
    store.add_message(chat, "user", "Tell me about gears.")
    store.add_message(chat, "assistant", "Gears turn other gears.")
    store.close()
    app = RecordingApp(options(pair))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.pair.drafters.default == "model+suffix"
        assert "1 past chat" in app.pair.drafters.labels["suffix"]
        assert "suffix lookup (1 past chat) + draft model" in figures_text(app)

"""Suffix decoding: the index, the count-based drafts, local vs history, eviction, rollback.

Pure Python: no model is involved. `naive_speculate` is the definition written the slow way
(every occurrence found by scanning), and the fast structure must agree with it exactly.
"""

from __future__ import annotations

import random
import tracemalloc

import pytest

from spectui.engine.drafters import suffix_tree
from spectui.engine.drafters.suffix_tree import SpecLimits, SuffixCache, SuffixIndex, speculate_in
from spectui.engine.drafters.token_index import SENTINEL, ContextIndex, TokenIndex

# --- a reference written the slow way ---------------------------------------------------------


def naive_follow(store: list[int], positions: list[int], cap: int, min_prob: float,
                 open_end: bool, solo_cap: int) -> tuple[list[int], list[float]]:
    tokens: list[int] = []
    probs: list[float] = []
    prob = 1.0
    end = len(store)

    def at(p: int) -> int | None:
        if p < end:
            return store[p]
        return tokens[p - end] if open_end and p - end < len(tokens) else None

    while len(tokens) < cap and positions:
        nexts = [at(p) for p in positions]
        counts: dict[int, int] = {}
        for t in nexts:
            if t is not None and t != SENTINEL:
                counts[t] = counts.get(t, 0) + 1
        if not counts:
            break
        token = max(counts, key=lambda t: counts[t])  # first seen = most recent wins ties
        if prob * counts[token] / len(positions) < min_prob:
            break
        if len(tokens) >= solo_cap and counts[token] < 2:  # past solo_cap only where two agree
            break
        prob *= counts[token] / len(positions)
        tokens.append(token)
        probs.append(prob)
        positions = [p + 1 for p, t in zip(positions, nexts, strict=True) if t == token]
    return tokens, probs


def naive_speculate(store: list[int], context: list[int], limits: SpecLimits, min_match: int,
                    open_end: bool) -> tuple[list[int], list[float], int]:
    """Every match length from the longest down; the best score wins, the longer one on a tie."""
    best: tuple[list[int], list[float], int] = ([], [], 0)
    best_score = 0.0
    for m in range(min(limits.max_depth, len(context)), min_match - 1, -1):
        suffix = context[-m:]
        positions = [p for p in range(len(store) - 1, m - 1, -1) if store[p - m:p] == suffix]
        tokens, probs = naive_follow(store, positions, limits.cap(m), limits.min_token_prob, open_end,
                                     limits.solo_cap(m))
        if sum(probs) > best_score:
            best, best_score = (tokens, probs, m), sum(probs)
    return best


def random_text(rng: random.Random, length: int, alphabet: int) -> list[int]:
    """Small-alphabet text with copied stretches, so that matches of every length occur."""
    out: list[int] = []
    while len(out) < length:
        if out and rng.random() < 0.3:
            start = rng.randrange(len(out))
            out.extend(out[start:start + rng.randrange(1, 12)])
        else:
            out.append(rng.randrange(alphabet))
    return out[:length]


# --- the index --------------------------------------------------------------------------------


def test_index_incremental_equals_rebuilt_through_appends_truncations_and_replacements() -> None:
    rng = random.Random(7)
    for _ in range(40):
        index, reference = TokenIndex((1, 2, 3, 8)), []
        for _ in range(25):
            action = rng.random()
            if action < 0.4:
                token = rng.randrange(5)
                index.append(token)
                reference.append(token)
            elif action < 0.6:
                new = random_text(rng, rng.randrange(200), 5)
                index.extend(new)
                reference.extend(new)
            elif action < 0.8:
                keep = rng.randrange(len(reference) + 1)
                index.truncate(keep)
                del reference[keep:]
            elif action < 0.85:
                reference = random_text(rng, rng.randrange(2000), 5)
                index.replace(reference)
            else:
                new = random_text(rng, rng.randrange(1500), 5)  # may grow the tables
                index.extend(new)
                reference.extend(new)
            assert index.tokens.tolist() == reference
            index.check()


def test_occurrences_are_every_earlier_position_most_recent_first() -> None:
    rng = random.Random(3)
    text = random_text(rng, 3000, 4)
    index = TokenIndex((2, 3))
    index.extend(text)
    for key in ([0, 1], [3, 3, 2], [1, 2]):
        expected = [p for p in range(len(text) - 1, len(key) - 1, -1) if text[p - len(key):p] == key]
        assert index.occurrences(key, limit=10**6) == expected
        assert index.occurrences(key, limit=5) == expected[:5]


def test_check_notices_a_broken_chain() -> None:
    index = TokenIndex((2,))
    index.extend([1, 2, 3, 1, 2, 4])
    index._prev[0][5] = -1  # 1 2 -> 4 unlinked from 1 2 -> 3
    with pytest.raises(AssertionError):
        index.check()


# --- drafts -----------------------------------------------------------------------------------


def test_a_past_sequence_is_proposed_after_its_suffix_matches() -> None:
    index = SuffixIndex()
    index.add([10, 11, 12, 13, 14, 15, 16, 17])
    draft = index.speculate([99, 11, 12, 13], max_tokens=8, max_spec_factor=2.0)
    assert draft.tokens == [14, 15, 16, 17]  # stops at the end of the sequence
    assert draft.probs == [1.0] * 4
    assert draft.match_length == 3
    assert draft.score == 4.0


def test_counts_give_the_frequent_continuation_and_its_probability() -> None:
    index = SuffixIndex()
    for follow in (7, 7, 8, 7):  # "1 2 3" was followed by 7 three times, by 8 once
        index.add([5, 1, 2, 3, follow, 9])
    draft = index.speculate([1, 2, 3], max_tokens=2, max_spec_factor=1.0)
    assert draft.tokens == [7, 9]
    assert draft.probs == pytest.approx([0.75, 0.75])
    assert draft.score == pytest.approx(1.5)


def test_the_longest_match_is_preferred() -> None:
    index = SuffixIndex()
    index.add([4, 2, 3, 50, 51])  # "2 3" -> 50 (and "4 2 3" -> 50)
    index.add([1, 2, 3, 60, 61])  # "1 2 3" -> 60
    index.add([9, 2, 3, 50, 51])
    draft = index.speculate([7, 1, 2, 3], max_tokens=2, max_spec_factor=1.0)
    assert (draft.tokens, draft.match_length) == ([60, 61], 3)
    draft = index.speculate([7, 8, 2, 3], max_tokens=2, max_spec_factor=1.0)
    assert draft.tokens == [50, 51]
    assert draft.probs == pytest.approx([2 / 3, 2 / 3])


def test_min_token_prob_stops_at_an_uncertain_branch() -> None:
    index = SuffixIndex()
    for follow in (7, 8, 9):  # after "1 2 3 4" each of three tokens once: p = 1/3
        index.add([1, 2, 3, 4, follow])
    context = [0, 1, 2, 3]
    assert index.speculate(context, 8, max_spec_factor=2.0, min_token_prob=0.5).tokens == [4]
    draft = index.speculate(context, 8, max_spec_factor=2.0, min_token_prob=0.3)
    assert draft.tokens == [4, 9]  # a three-way tie: the most recent sequence's token
    assert draft.probs == pytest.approx([1.0, 1 / 3])


def test_a_sequence_that_ended_after_the_match_counts_against_its_continuations() -> None:
    index = SuffixIndex()
    index.add([5, 1, 2, 3])  # the reply ended after "1 2 3"
    index.add([6, 1, 2, 3, 9])
    assert index.speculate([1, 2, 3], 1, min_token_prob=0.6).tokens == []
    draft = index.speculate([1, 2, 3], 1, min_token_prob=0.5)
    assert (draft.tokens, draft.probs) == ([9], [0.5])


def test_ties_go_to_the_most_recent_occurrence() -> None:
    index = SuffixIndex()
    index.add([1, 2, 3, 7])
    index.add([1, 2, 3, 8])
    draft = index.speculate([1, 2, 3], 1, min_token_prob=0.1)
    assert draft.tokens == [8]


def test_length_is_capped_by_match_length_factor_offset_and_max_tokens() -> None:
    index = SuffixIndex()
    index.add(list(range(100, 140)))
    context = [0, 0, 103, 104, 105]  # matches 3 tokens
    assert len(index.speculate(context, 20, max_spec_factor=1.0).tokens) == 3
    assert len(index.speculate(context, 20, max_spec_factor=2.0).tokens) == 6
    assert len(index.speculate(context, 20, max_spec_factor=1.0, max_spec_offset=2.0).tokens) == 5
    assert len(index.speculate(context, 4, max_spec_factor=4.0).tokens) == 4
    assert index.speculate(context, 0, max_spec_factor=4.0).tokens == []
    assert len(index.speculate(context, 20, max_spec_factor=1.0, agreed_spec_factor=4.0).tokens) == 3  # seen once
    index.add(list(range(100, 140)))  # now two occurrences agree on every token
    assert len(index.speculate(context, 20, max_spec_factor=1.0, agreed_spec_factor=4.0).tokens) == 12
    assert len(index.speculate(context, 10, max_spec_factor=1.0, agreed_spec_factor=4.0).tokens) == 10


def test_nothing_is_proposed_for_an_empty_or_unseen_context() -> None:
    cache = SuffixCache()
    cache.add_history([1, 2, 3, 4, 5, 6])
    assert cache.propose([], 8) == ([], [])
    assert cache.propose([42], 8) == ([], [])
    assert cache.propose([40, 41, 42, 43], 8) == ([], [])
    assert SuffixIndex().speculate([1, 2, 3], 8).tokens == []


def test_the_fast_structure_agrees_with_the_slow_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(suffix_tree, "_LENGTHS_TRIED", 10**6)
    rng = random.Random(11)
    for trial in range(150):
        store = random_text(rng, rng.randrange(2, 400), rng.choice((2, 3, 6)))
        limits = SpecLimits(rng.randrange(1, 12), rng.choice((0.5, 1.0, 2.0)), rng.choice((0.0, 1.0)),
                            rng.choice((0.0, 0.1, 0.3)), max_depth=rng.choice((8, 16, 64)),
                            max_candidates=10**6, agreed_spec_factor=rng.choice((0.0, 4.0)))
        # local: the index holds the context itself, occurrences may run into the draft
        local = ContextIndex((2, 8))
        local.sync(store)
        draft = speculate_in(local, store, limits, open_end=True)
        tokens, probs, m = naive_speculate(store, store, limits, 2, open_end=True)
        assert (draft.tokens, draft.match_length) == (tokens, m), trial
        assert draft.probs == pytest.approx(probs)
        # history: a separate store, sequences closed by the sentinel
        history = SuffixIndex(budget_tokens=10**6)
        history.add(store[: len(store) // 2])
        history.add(store[len(store) // 2:])
        context = random_text(rng, 30, 3) + store[rng.randrange(len(store)):][:10]
        stored = history.index.tokens.tolist()
        draft = speculate_in(history.index, context, limits)
        tokens, probs, m = naive_speculate(stored, context, limits, 2, open_end=False)
        assert (draft.tokens, draft.match_length) == (tokens, m), trial
        assert draft.probs == pytest.approx(probs)


def test_a_loop_the_reply_is_in_is_proposed_for_the_full_length() -> None:
    cache = SuffixCache(max_spec_factor=4.0)
    tokens, probs = cache.propose([9, 1, 2, 3, 1, 2, 3, 1, 2], 7)
    assert tokens == [3, 1, 2, 3, 1, 2, 3]
    assert probs == [1.0] * 7


def test_code_pasted_back_with_an_edit() -> None:
    code = list(range(501, 517))  # made-up ids for a few lines of code the user pasted
    prompt = [1, 2, 3, *code, 4, 5]
    cache = SuffixCache(max_spec_factor=2.0)
    tokens, _ = cache.propose([*prompt, 6, 501, 502, 503], 6)
    assert tokens == [504, 505, 506, 507, 508, 509]  # 3 tokens matched: up to 6 proposed
    tokens, _ = cache.propose([*prompt, 6, 501, 502, 503, 777, 505], 6)
    assert tokens == []  # the edit: "777 505" was never seen
    tokens, _ = cache.propose([*prompt, 6, 501, 502, 503, 777, 505, 506], 6)
    assert tokens == [507, 508, 509, 510]  # "505 506" matched again: 2 tokens, so up to 4


def test_local_or_history_whichever_scores_higher() -> None:
    split = SuffixCache()
    split.add_history([1, 2, 3, 4, 30, 31, 32, 33])
    split.add_history([1, 2, 3, 4, 40, 41, 42, 43])  # history: after "1 2 3 4", 30 or 40
    draft = split.speculate([1, 2, 3, 4, 20, 21, 8, 1, 2, 3, 4], 4, max_spec_factor=4.0)
    assert (draft.source, draft.tokens, draft.score) == ("local", [20, 21, 8, 1], 4.0)
    agreed = SuffixCache()
    for _ in range(3):
        agreed.add_history([1, 2, 3, 4, 30, 31, 32, 33])
    context = [1, 2, 3, 4, 20, 1, 2, 3, 4, 21, 8, 1, 2, 3, 4]  # locally: 20 or 21
    draft = agreed.speculate(context, 4, max_spec_factor=4.0)
    assert (draft.source, draft.tokens, draft.score) == ("history", [30, 31, 32, 33], 4.0)
    tie = SuffixCache()
    tie.add_history([1, 2, 5])
    assert tie.speculate([1, 2, 5, 1, 2], 1).source == "local"  # equal scores: local wins


def test_history_eviction_keeps_the_store_within_its_budget() -> None:
    rng = random.Random(5)
    chats = [[1000 + i, *random_text(rng, rng.randrange(100, 900), 50)] for i in range(60)]
    tracemalloc.start()
    history = SuffixIndex(budget_tokens=5000)
    held = []
    for chat in chats:
        history.add(chat)
        assert len(history) <= 5000
        held.append(tracemalloc.get_traced_memory()[0])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    tables = 2 * 4 * 8192  # two chain tables sized for the budget (next power of two)
    assert max(held) < 5000 * 3 * 4 * 1.2 + tables  # store + two prev chains, int32, +20 % slack
    assert peak < max(held) + 5000 * 100  # a rebuild's numpy temporaries: < 100 bytes/token
    newest, oldest = chats[-1], chats[0]
    assert history.speculate(newest[:6], 3).tokens == newest[6:9]
    assert history.speculate(oldest[:6], 3).tokens != oldest[6:9]  # evicted, oldest first
    history.index.check()


def test_history_keeps_the_tail_of_a_sequence_longer_than_the_budget() -> None:
    history = SuffixIndex(budget_tokens=100)
    history.add(list(range(1000, 1300)))
    assert len(history) == 100
    assert history.speculate([1250, 1251], 2).tokens == [1252, 1253]
    assert history.speculate([1050, 1051], 2).tokens == []


def test_adding_a_key_again_replaces_that_sequence() -> None:
    history = SuffixIndex()
    history.add([1, 2, 3, 4], key="chat-1")
    history.add([1, 2, 3, 5], key="chat-2")
    history.add([1, 2, 3, 6, 7], key="chat-1")
    assert history.sequences == 2
    assert len(history) == 4 + 1 + 5 + 1
    assert history.speculate([1, 2, 3], 1).tokens == [6]  # chat-1 is now the most recent
    assert history.speculate([2, 3, 4], 1).tokens == []
    history.index.check()


def test_re_adding_the_newest_chat_equals_adding_it_once() -> None:
    rng = random.Random(12)
    older = [random_text(rng, 300, 8) for _ in range(3)]
    chat = random_text(rng, 200, 8)
    grown = SuffixIndex()
    for i, text in enumerate(older):
        grown.add(text, key=i)
    for end in (50, 120, 200):  # the open chat, re-added after each reply
        grown.add(chat[:end], key="open")
    once = SuffixIndex()
    for i, text in enumerate(older):
        once.add(text, key=i)
    once.add(chat, key="open")
    assert grown.index.tokens == once.index.tokens
    grown.index.check()
    for _ in range(50):
        context = random_text(rng, 20, 8)
        assert grown.speculate(context, 6, 2.0) == once.speculate(context, 6, 2.0)


def test_rollback_and_a_changed_context_give_what_a_fresh_cache_gives() -> None:
    rng = random.Random(9)
    for _ in range(25):
        history = random_text(rng, 300, 6)
        cache = SuffixCache(max_spec_factor=2.0)
        cache.add_history(history)
        context = random_text(rng, rng.randrange(1, 500), 6)
        for _ in range(30):
            action = rng.random()
            if action < 0.6:
                context = context + random_text(rng, rng.randrange(1, 9), 6)  # accepted + bonus
            elif action < 0.8:
                context = context[: rng.randrange(len(context) + 1)]  # regenerate / roll back
            elif action < 0.9:
                cut = rng.randrange(len(context) + 1)
                context = context[:cut] + random_text(rng, rng.randrange(0, 50), 6)  # an edit
            else:
                context = random_text(rng, rng.randrange(0, 300), 6)  # another chat
            draft = cache.speculate(context, 8, max_spec_factor=2.0)
            fresh = SuffixCache(max_spec_factor=2.0)
            fresh.add_history(history)
            assert draft == fresh.speculate(context, 8, max_spec_factor=2.0)
        assert cache.local.tokens.tolist() == context
        cache.local.check()


def test_prefill_reads_the_prompt_and_reset_forgets_it_but_not_the_history() -> None:
    cache = SuffixCache()
    cache.add_history([1, 2, 3, 4])
    cache.prefill([5, 6, 7, 5, 6])
    assert cache.local.tokens.tolist() == [5, 6, 7, 5, 6]
    assert cache.propose([5, 6, 7, 5, 6], 1) == ([7], [1.0])
    cache.reset()
    assert len(cache.local) == 0
    assert cache.propose([9, 1, 2, 3], 1) == ([4], [1.0])


def test_observe_counts_what_was_kept_per_source() -> None:
    cache = SuffixCache(max_spec_factor=4.0)
    cache.add_history([5, 6, 7, 8, 9, 10])
    tokens, _ = cache.propose([1, 5, 6, 7], 3)
    assert tokens == [8, 9, 10]
    cache.observe(2)
    cache.observe(3)  # no proposal pending: ignored
    assert cache.stats.proposed["history"] == 3
    assert cache.stats.accepted["history"] == 2
    assert cache.stats.calibration == pytest.approx(2 / 3)
    cache.propose([1, 2, 3], 3)  # nothing proposed
    cache.observe(1)
    assert sum(cache.stats.proposals.values()) == 1


def test_memory_per_token_is_a_few_int32() -> None:
    rng = random.Random(2)
    history = SuffixIndex(budget_tokens=100_000)
    for _ in range(50):
        history.add(random_text(rng, 2000, 1000))
    assert history.nbytes / len(history) < 40  # store + 2 chains + 2 tables, int32 each


@pytest.mark.parametrize("bad", [{"min_token_prob": 1.5}, {"max_depth": 4}, {"max_depth": 65}])
def test_bad_settings_are_refused_with_a_clear_message(bad: dict) -> None:
    with pytest.raises(ValueError, match="must lie in"):
        SuffixCache(**bad)

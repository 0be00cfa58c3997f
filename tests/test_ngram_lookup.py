"""Prompt lookup: the most recent earlier occurrence of the longest n-gram, and what followed it."""

from __future__ import annotations

import random

import pytest

from spectui.engine.drafters.ngram_lookup import PromptLookup


def naive_lookup(context: list[int], k: int, min_ngram: int, max_ngram: int) -> tuple[list[int], int] | None:
    """The definition, by scanning: n from max down, the latest earlier match, k tokens after it."""
    end = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        if n >= end:
            continue
        for p in range(end - 1, n - 1, -1):  # p: the position after an earlier n-gram
            if context[p - n:p] == context[end - n:]:
                extended = list(context)
                while len(extended) < p + k:
                    extended.append(extended[len(extended) - (end - p)])  # the loop continues
                return extended[p:p + k], n
    return None


def random_text(rng: random.Random, length: int, alphabet: int) -> list[int]:
    out: list[int] = []
    while len(out) < length:
        if out and rng.random() < 0.3:
            start = rng.randrange(len(out))
            out.extend(out[start:start + rng.randrange(1, 10)])
        else:
            out.append(rng.randrange(alphabet))
    return out[:length]


def test_the_most_recent_match_is_proposed() -> None:
    lookup = PromptLookup(min_ngram=2, max_ngram=4)
    context = [1, 2, 3, 10, 11, 9, 1, 2, 3, 20, 21, 9, 1, 2, 3]
    match = lookup.lookup(context, 2)
    assert match is not None
    assert (match.tokens, match.ngram, match.position) == ([20, 21], 4, 9)  # "9 1 2 3" -> 20 21


def test_a_longer_ngram_beats_a_more_recent_shorter_one() -> None:
    lookup = PromptLookup(min_ngram=2, max_ngram=4)
    context = [7, 1, 2, 3, 40, 41, 5, 2, 3, 50, 51, 6, 7, 1, 2, 3]
    match = lookup.lookup(context, 2)
    assert match is not None
    assert (match.tokens, match.ngram) == ([40, 41], 4)  # "7 1 2 3", not the later "2 3" -> 50


def test_no_match_shorter_than_min_ngram() -> None:
    lookup = PromptLookup(min_ngram=3, max_ngram=5)
    assert lookup.lookup([1, 2, 8, 9, 1, 2], 4) is None  # only "1 2" (n = 2) occurs earlier
    assert lookup.propose([1, 2, 8, 9, 1, 2], 4) == ([], [])


def test_nothing_for_an_empty_or_unseen_context() -> None:
    lookup = PromptLookup()
    assert lookup.propose([], 4) == ([], [])
    assert lookup.propose([5], 4) == ([], [])
    assert lookup.propose([1, 2, 3, 4, 5, 6], 4) == ([], [])
    assert lookup.propose([1, 2, 3, 1, 2], 0) == ([], [])


def test_at_most_k_tokens_and_a_loop_continues_past_the_end() -> None:
    lookup = PromptLookup(min_ngram=2, max_ngram=3)
    assert lookup.propose([*range(100, 120), 100, 101], 5)[0] == [102, 103, 104, 105, 106]
    tokens, _ = lookup.propose([9, 4, 5, 6, 4, 5], 7)  # "4 5" -> "6 4 5" then the loop goes on
    assert tokens == [6, 4, 5, 6, 4, 5, 6]


def test_code_repeated_with_an_edit() -> None:
    code = list(range(501, 521))  # made-up ids for the lines of code the user pasted
    prompt = [1, 2, 3, *code, 4, 5, 6]
    lookup = PromptLookup(min_ngram=2, max_ngram=4)
    assert lookup.propose([*prompt, 7, 501, 502, 503], 5)[0] == [504, 505, 506, 507, 508]
    # the reply changed 506 into 900 901: no n-gram ends in the edit, then the copy resumes
    assert lookup.propose([*prompt, 7, 501, 502, 503, 504, 505, 900, 901], 5)[0] == []
    tokens, _ = lookup.propose([*prompt, 7, 501, 502, 503, 504, 505, 900, 901, 507, 508], 5)
    assert tokens == [509, 510, 511, 512, 513]


def test_agrees_with_the_scanning_definition_on_random_text() -> None:
    rng = random.Random(4)
    for _ in range(300):
        min_ngram = rng.randrange(1, 4)
        max_ngram = min_ngram + rng.randrange(0, 4)
        lookup = PromptLookup(min_ngram, max_ngram)
        context = random_text(rng, rng.randrange(0, 300), rng.choice((2, 4, 8)))
        k = rng.randrange(1, 9)
        match = lookup.lookup(context, k)
        expected = naive_lookup(context, k, min_ngram, max_ngram)
        assert (None if match is None else (match.tokens, match.ngram)) == expected


def test_rollback_and_changed_contexts_give_what_a_fresh_index_gives() -> None:
    rng = random.Random(8)
    lookup = PromptLookup(min_ngram=2, max_ngram=5)
    context = random_text(rng, 200, 5)
    for _ in range(200):
        action = rng.random()
        if action < 0.6:
            context = context + random_text(rng, rng.randrange(1, 9), 5)
        elif action < 0.8:
            context = context[: rng.randrange(len(context) + 1)]
        elif action < 0.95:
            cut = rng.randrange(len(context) + 1)
            context = context[:cut] + random_text(rng, rng.randrange(40), 5)
        else:
            context = random_text(rng, rng.randrange(700), 5)
        fresh = PromptLookup(min_ngram=2, max_ngram=5)
        assert lookup.propose(context, 6) == fresh.propose(context, 6)
    assert lookup.index.tokens.tolist() == context
    lookup.index.check()


def test_consistency_counts_how_often_the_ngram_was_followed_the_same_way() -> None:
    lookup = PromptLookup(min_ngram=2, max_ngram=2)
    context = [1, 2, 7, 0, 1, 2, 7, 0, 1, 2, 8, 0, 1, 2, 7, 0, 1, 2]  # "1 2" -> 7, 7, 8, 7
    match = lookup.lookup(context, 3)
    assert match is not None
    assert (match.tokens, match.occurrences, match.agreeing) == ([7, 0, 1], 4, 3)
    assert match.consistency == pytest.approx(0.75)
    assert match.confidence == pytest.approx(0.5 * 0.75)  # untrained rate 1/2, times 3/4
    assert match.probs == pytest.approx([0.375, 0.375 * 0.75, 0.375 * 0.75**2])
    assert match.score == pytest.approx(sum(match.probs))


def test_observe_learns_how_often_proposals_are_accepted() -> None:
    lookup = PromptLookup(min_ngram=2, max_ngram=3)
    context = [1, 2, 3, 4, 5, 6, 9, 1, 2]
    _, before = lookup.propose(context, 4)
    for _ in range(20):
        lookup.propose(context, 4)
        lookup.observe(4)  # all accepted
    _, trusted = lookup.propose(context, 4)
    assert trusted[0] > before[0] and trusted[-1] > before[-1]
    for _ in range(40):
        lookup.propose(context, 4)
        lookup.observe(0)  # all rejected
    _, doubted = lookup.propose(context, 4)
    assert doubted[0] < before[0]
    lookup.observe(1)  # the `doubted` proposal
    lookup.observe(3)  # no proposal pending since the last observe: ignored
    assert lookup.first_accepted[2].trials == 2 + 20 + 40 + 1  # the prior's weight is 2
    assert lookup.first_accepted[3].trials == 2  # only n = 2 proposals were observed


def test_bad_ngram_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookup(min_ngram=4, max_ngram=2)

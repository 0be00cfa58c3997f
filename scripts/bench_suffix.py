"""Cost and memory of the draftless drafters (suffix decoding, prompt lookup) on synthetic chats.

    python scripts/bench_suffix.py [--context 8192] [--history 200000] [--reply 2000] [--k 8]

A synthetic corpus stands in for tokenised chats: Zipf-distributed words of 1-3 tokens from a
32k vocabulary, where about 40 % of the text copies an earlier stretch of the same chat with a few
edits (the code-pasted-back-edited case). It measures:
  1. building the history index from `--history` tokens of past chats (add_history, one per chat),
     and its memory with tracemalloc (bytes per stored token);
  2. reading an 8k-token conversation into the local index (the first propose of a chat);
  3. steady state, per speculative cycle: the context grows by the accepted draft + 1 token,
     then one propose() of k tokens (SuffixCache, then PromptLookup): median / p90 / p99, and
     the acceptance an oracle target (the synthetic reply itself) gives each drafter;
  4. a rollback: the context shrinks by 300 tokens and grows again.
Wall-clock figures depend on the machine and its load; counts and bytes do not.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time
import tracemalloc

from spectui.engine.drafters.ngram_lookup import PromptLookup
from spectui.engine.drafters.suffix_tree import SuffixCache

VOCAB = 32_000


def synthetic_chat(rng: random.Random, length: int, words: list[list[int]]) -> list[int]:
    """Zipfian word soup with copied-and-edited stretches of itself."""
    out: list[int] = []
    cumulative = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(words))))
    while len(out) < length:
        if len(out) > 200 and rng.random() < 0.02:
            start = rng.randrange(len(out) - 100)
            stretch = out[start:start + rng.randrange(20, 100)]
            for _ in range(rng.randrange(3)):
                stretch[rng.randrange(len(stretch))] = rng.randrange(VOCAB)
            out.extend(stretch)
        else:
            out.extend(rng.choices(words, cum_weights=cumulative)[0])
    return out[:length]


def vocabulary(rng: random.Random, size: int = 20_000) -> list[list[int]]:
    return [[rng.randrange(VOCAB) for _ in range(rng.choice((1, 1, 2, 3)))] for _ in range(size)]


def measure_history(rng: random.Random, words: list[list[int]], total: int) -> SuffixCache:
    chats = [synthetic_chat(rng, rng.randrange(500, 3500), words) for _ in range(total // 2000 + 1)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    cache = SuffixCache(history_budget_tokens=total)
    for i, chat in enumerate(chats):
        cache.add_history(chat, key=i)
    elapsed = time.perf_counter() - started
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    stored = len(cache.history)
    print(f"history: {cache.history.sequences} chats, {stored} tokens stored (budget {total}), "
          f"built in {elapsed * 1e3:.0f} ms")
    print(f"  tracemalloc: {held / 1e6:.2f} MB held = {held / stored:.1f} bytes/token "
          f"(array buffers {cache.history.nbytes / stored:.1f} bytes/token)")
    return cache


def measure_cycles(name: str, drafter: SuffixCache | PromptLookup, context: list[int],
                   reply: list[int], k: int) -> None:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    started = time.perf_counter()
    drafter.propose(context, k)
    first = time.perf_counter() - started
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(f"{name}: first propose at {len(context)} tokens {first * 1e3:.1f} ms, "
          f"local index {held / len(context):.1f} bytes/token (tracemalloc)")
    index = drafter.local if isinstance(drafter, SuffixCache) else drafter.index
    costs, syncs, proposed, accepted_total = [], [], 0, 0
    i, step = 0, 1
    while i < len(reply):
        context.extend(reply[i:i + step])  # the accepted tokens and the target's own one
        i += step
        started = time.perf_counter()
        index.sync(context)  # the appends alone (propose's own sync then finds nothing new)
        synced = time.perf_counter()
        tokens, _ = drafter.propose(context, k)
        costs.append(time.perf_counter() - started)
        syncs.append(synced - started)
        # an oracle target: it accepts the proposal as far as it agrees with the real reply
        accepted = next((j for j, t in enumerate(tokens) if reply[i + j:i + j + 1] != [t]), len(tokens))
        drafter.observe(accepted)
        proposed += len(tokens)
        accepted_total += accepted
        step = accepted + 1
    print(f"  per cycle (append accepted + 1 tokens, propose {k}): {summary(costs)} "
          f"over {len(costs)} cycles")
    print(f"    of which appending the new tokens: {summary(syncs)}")
    print(f"    oracle acceptance: {accepted_total}/{proposed} proposed tokens, "
          f"{len(reply) / len(costs):.2f} tokens per cycle")
    started = time.perf_counter()
    drafter.propose(context[:-300], k)
    drafter.propose(context, k)
    print(f"  rollback by 300 tokens and forward again: {(time.perf_counter() - started) * 1e3:.1f} ms")


def summary(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6  # noqa: E731
    return (f"median {at(0.5):.0f} µs, p90 {at(0.9):.0f} µs, p99 {at(0.99):.0f} µs, "
            f"mean {statistics.fmean(ordered) * 1e6:.0f} µs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--history", type=int, default=200_000)
    parser.add_argument("--reply", type=int, default=2000, help="the last N context tokens are generated")
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    words = vocabulary(rng)
    cache = measure_history(rng, words, args.history)
    conversation = synthetic_chat(rng, args.context, words)
    prompt, reply = conversation[:-args.reply], conversation[-args.reply:]
    measure_cycles("suffix", cache, list(prompt), reply, args.k)
    measure_cycles("ngram", PromptLookup(), list(prompt), reply, args.k)


if __name__ == "__main__":
    main()

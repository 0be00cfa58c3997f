"""How fast any draft-length policy could go with this draft, on this machine: the ceiling.

    .venv/bin/python scripts/chain_ceiling.py TARGET.gguf DRAFT.gguf --threads 1 --tokens 128

Issue #35 asks where the rest of the speed-up goes. Whatever picks the draft length (K = auto,
llama.cpp's n-max and p-min, anything), a chain drafted by this draft model can do no better than
an *oracle* that knows where the draft will be wrong. This script computes that bound from two
things measured here:

* **costs**: a target pass of r rows (r = 1..33) after the prompt, and one draft pass, each the
  fastest of `--tries` (what the machine does undisturbed: a busy neighbour only adds time);
* **agreement**: along the target's own reply to each of `spectui bench`'s prompts (rendered with
  the chat template, as bench does), whether the draft would propose the target's token.
  At T = 0 that is the draft's argmax against the target's greedy token, exactly. At T > 0 it is
  the chance a rejection-sampled proposal is kept, beta = sum_x min(p(x), q(x)) with p and q the
  target's and the draft's sampling distributions (top-k, top-p, min-p as configured) along one
  sampled reply; an outcome is drawn from it for each position (`--draws` times).

With a(j) the draft's correct run from position j (how many tokens in a row it gets right), the
oracle drafts m <= a(j) tokens, all accepted, and the target adds its own: m + 1 tokens for
v(m + 1) + m * d seconds (v: verify pass by rows, d: draft pass). The best m per cycle is a
dynamic programme over the reply: the least time to produce it. Reported against speculation
off (one row per token: v(1) each):

* `oracle chain`: the bound for every chain policy with this draft;
* `best fixed K`: what the best single K gets (drafting K, keeping min(a, K));
* `oracle top-2 tree`: the same bound when the target's token need only be among the draft's two
  likeliest (T = 0), the second choice added as a row only at the levels that need it (an oracle
  tree); how much trees of this draft could add at most.

Figures compare with `scripts/bench_wide.py`'s measured speed-ups (the same prompts, K = auto and
llama.cpp's best n-max): a goal above the oracle cannot be met by choosing K better.
Nothing here is a test: it measures.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from spectui.bench import DEFAULT_PROMPTS
from spectui.chat.template import ChatFormat, ChatMessage, encode_prompt
from spectui.engine.generation_config import LLAMA_CPP_SAMPLING, SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.sampling import Dist, distribution, sample

MAX_ROWS = 33
"""Verify rows timed: K up to 32, as far as the lookups may go (`limits.MAX_LOOKUP_DRAFT`)."""
CHUNK = 32
"""Logit rows read per draft pass when scoring a reply (`buffers.MAX_LOGIT_ROWS`)."""


def pass_costs(target: LlamaModel, draft: LlamaModel, prompt: list[int], tries: int,
               sizes: Sequence[int] = range(1, MAX_ROWS + 1)) -> tuple[dict[int, float], float]:
    """Seconds of a target pass by rows (`sizes`) after `prompt`, and of one draft pass: the
    fastest of `tries` (also `scripts/bench_trees.py --frozen-costs`)."""
    filler = (prompt * (max(sizes) // len(prompt) + 1))[:max(sizes)]
    target.sync(prompt)
    draft.sync(prompt)
    rows = {n: float("inf") for n in sizes}
    best_draft = float("inf")
    for _ in range(tries):
        for n in rows:
            start = time.perf_counter()
            target.extend(filler[:n], n_logits=min(n, CHUNK))
            rows[n] = min(rows[n], time.perf_counter() - start)
            target.truncate(len(prompt))
        start = time.perf_counter()
        draft.extend(filler[:1])
        best_draft = min(best_draft, time.perf_counter() - start)
        draft.truncate(len(prompt))
    return rows, best_draft


def target_reply(target: LlamaModel, prompt: list[int], n: int, cfg: SamplingConfig,
                 rng: np.random.Generator) -> tuple[list[int], list[Dist]]:
    """The target's reply (greedy at T = 0, else sampled) and its distribution at each token."""
    logits = target.sync(prompt)
    tokens: list[int] = []
    dists: list[Dist] = []
    for _ in range(n):
        dist = distribution(logits, cfg)
        token = int(dist.ids[int(np.argmax(dist.probs))]) if cfg.greedy else sample(dist, rng)
        if target.is_eog(token):
            break
        tokens.append(token)
        dists.append(dist)
        logits = target.extend([token])[0]
    return tokens, dists


def draft_rows(draft: LlamaModel, prompt: list[int], reply: list[int]) -> list[np.ndarray]:
    """The draft's logits before each token of `reply` (given the target's tokens before it)."""
    rows = [np.array(draft.sync(prompt), copy=True)]
    for start in range(0, len(reply) - 1, CHUNK):
        chunk = reply[start:start + CHUNK][: len(reply) - 1 - start]
        out = draft.extend(chunk, n_logits=len(chunk))
        rows.extend(np.array(row, copy=True) for row in out)
    return rows


def runs(right: list[bool], cap: int) -> list[int]:
    """a(j): how many tokens in a row the draft gets right from position j (at most `cap`)."""
    out = [0] * (len(right) + 1)
    for j in range(len(right) - 1, -1, -1):
        out[j] = min(cap, out[j + 1] + 1) if right[j] else 0
    return out


def oracle_seconds(run: list[int], verify: dict[int, float], draft: float,
                   misses: list[int] | None = None) -> float:
    """Least time to produce the reply when each cycle may draft any m <= run[j] (all accepted).

    With `misses` (a top-2 tree): misses[j] counts the positions before j where the draft's first
    choice was wrong; each such level of the cycle adds its second choice as one more row."""
    n = len(run) - 1
    best = [0.0] * (n + 2)
    for j in range(n - 1, -1, -1):
        options = []
        for m in range(0, min(run[j], n - j - 1) + 1):
            extra = misses[j + m] - misses[j] if misses is not None else 0
            options.append(verify[min(m + 1 + extra, MAX_ROWS)] + m * draft + best[min(j + m + 1, n)])
        best[j] = min(options)
    return best[0]


def fixed_k_seconds(run: list[int], verify: dict[int, float], draft: float, k: int) -> float:
    """Time with K drafted every cycle, min(a, K) kept."""
    j, seconds, n = 0, 0.0, len(run) - 1
    while j < n:
        kept = min(run[j], k)
        seconds += verify[k + 1] + k * draft if k else verify[1]
        j += kept + 1
    return seconds


def confident_seconds(run: list[int], top: list[float], verify: dict[int, float], draft: float,
                      k: int, p_min: float) -> float:
    """Time when each cycle drafts while the draft's own top probability is >= p_min, at most K
    (llama.cpp's --spec-draft-p-min). An estimate: up to and including its first wrong token the
    draft reads the target's tokens, so its confidence there is exact; past it the draft follows
    its own path, whose confidence is taken from the target's path at the same positions."""
    j, seconds, n = 0, 0.0, len(run) - 1
    while j < n:
        m = 0
        while m < k and j + m < n and top[j + m] >= p_min:
            m += 1
        seconds += verify[m + 1] + m * draft
        j += min(run[j], m) + 1
    return seconds


def knowing_seconds(run: list[int], beta: list[float], verify: dict[int, float], draft: float, cap: int) -> float:
    """Time when each cycle picks the K with the most expected tokens per second, knowing every
    position's chance of acceptance (not the draw): more than any drafter knows."""
    j, seconds, n = 0, 0.0, len(run) - 1
    while j < n:
        best_k, best_rate, expected, alive = 0, 1.0 / verify[1], 1.0, 1.0
        for k in range(1, min(cap, n - j - 1) + 1):
            alive *= beta[j + k - 1]
            expected += alive
            rate = expected / (verify[k + 1] + k * draft)
            if rate > best_rate:
                best_k, best_rate = k, rate
        seconds += verify[best_k + 1] + best_k * draft
        j += min(run[j], best_k) + 1
    return seconds


P_MINS = (0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 0.95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("draft", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--temperatures", default="0,0.8")
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--draws", type=int, default=20)
    parser.add_argument("--max-k", type=int, default=16)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report: dict[str, object] = {"target": str(args.target), "draft": str(args.draft), "threads": args.threads,
                                 "tokens": args.tokens, "max_k": args.max_k}
    with LlamaModel.load(args.target, n_ctx=2048, n_threads=args.threads) as target, \
            LlamaModel.load(args.draft, n_ctx=2048, n_threads=args.threads) as draft:
        chat = ChatFormat.from_model(target)
        prompts = [encode_prompt(target, chat.render([ChatMessage("user", text)])) for text in DEFAULT_PROMPTS]
        verify, draft_cost = pass_costs(target, draft, prompts[0], args.tries)
        report["verify_ms"] = {n: round(s * 1e3, 2) for n, s in verify.items()}
        report["draft_ms"] = round(draft_cost * 1e3, 3)
        shape = ", ".join(f"{n}:{verify[n] / verify[1]:.2f}" for n in (2, 4, 8, 9, 12, 16, 17, 24, 33))
        print(f"v(r)/v(1): {shape} | v(1) {verify[1] * 1e3:.1f} ms, draft {draft_cost * 1e3:.2f} ms "
              f"({draft_cost / verify[1]:.3f} of v(1))")
        for temperature in (float(t) for t in args.temperatures.split(",")):
            cfg = replace(LLAMA_CPP_SAMPLING, temperature=temperature)
            rng = np.random.default_rng(1)
            totals = {"off": 0.0, "oracle chain": 0.0, "oracle top-2 tree": 0.0, "knowing": 0.0}
            confident = {(k, p): 0.0 for k in (4, 6, 8, 12, 16) for p in P_MINS}
            fixed = {k: 0.0 for k in range(1, args.max_k + 1)}
            right_all: list[float] = []
            for prompt in prompts:
                target.reset()
                draft.reset()
                reply, dists = target_reply(target, prompt, args.tokens, cfg, rng)
                rows = draft_rows(draft, prompt, reply)
                if cfg.greedy:
                    top = [np.argsort(-row)[:2] for row in rows]
                    right = [bool(top[i][0] == tok) for i, tok in enumerate(reply)]
                    right2 = [bool(tok in top[i]) for i, tok in enumerate(reply)]
                    outcomes = [(right, right2)]
                    right_all.extend(float(r) for r in right)
                    top_prob = [float(1.0 / np.exp(row.astype(np.float64) - row.max()).sum()) for row in rows]
                    run = runs(right, args.max_k)
                    for k, p in confident:
                        confident[k, p] += confident_seconds(run, top_prob, verify, draft_cost, k, p)
                else:
                    beta = [float(np.minimum(p.dense(len(row)), distribution(row, cfg).dense(len(row))).sum())
                            for p, row in zip(dists, rows, strict=True)]
                    right_all.extend(beta)
                    outcomes = [([bool(draw_rng < b) for draw_rng, b in zip(rng.random(len(beta)), beta, strict=True)],
                                 None) for _ in range(args.draws)]
                share = 1.0 / len(outcomes)
                for right, right2 in outcomes:
                    run = runs(right, args.max_k)
                    totals["off"] += share * verify[1] * len(reply)
                    totals["oracle chain"] += share * oracle_seconds(run, verify, draft_cost)
                    if right2 is not None:
                        misses = [0, *np.cumsum([not r for r in right]).tolist()]
                        totals["oracle top-2 tree"] += share * oracle_seconds(runs(right2, args.max_k), verify,
                                                                              draft_cost, misses)
                    for k in fixed:
                        fixed[k] += share * fixed_k_seconds(run, verify, draft_cost, k)
                    if not cfg.greedy:
                        totals["knowing"] += share * knowing_seconds(run, beta, verify, draft_cost, args.max_k)
            best_k = min(fixed, key=lambda k: fixed[k])
            result = {"acceptance": round(float(np.mean(right_all)), 3),
                      "oracle_chain_x": round(totals["off"] / totals["oracle chain"], 3),
                      "best_fixed_k": best_k, "best_fixed_k_x": round(totals["off"] / fixed[best_k], 3),
                      "fixed_k_x": {k: round(totals["off"] / s, 3) for k, s in fixed.items()}}
            if cfg.greedy:
                result["oracle_top2_tree_x"] = round(totals["off"] / totals["oracle top-2 tree"], 3)
                best_kp = min(confident, key=lambda kp: confident[kp])
                result["best_p_min"] = {"k": best_kp[0], "p_min": best_kp[1],
                                        "x": round(totals["off"] / confident[best_kp], 3)}
            else:
                result["knowing_x"] = round(totals["off"] / totals["knowing"], 3)
            report[f"T={temperature:g}"] = result
            print(f"T {temperature:g}: acceptance {result['acceptance']:.2f}; "
                  f"oracle chain {result['oracle_chain_x']:.2f}x off;"
                  f" best fixed K {best_k} {result['best_fixed_k_x']:.2f}x"
                  + (f"; oracle top-2 tree {result['oracle_top2_tree_x']:.2f}x; best K and p-min (estimate) "
                     f"{result['best_p_min']}" if cfg.greedy else f"; knowing each beta {result['knowing_x']:.2f}x"))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

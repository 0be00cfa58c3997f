"""Comparing what llama.cpp computed along two paths, with bounds that hold on any host.

The same context evaluated through different batch shapes (one prompt batch, a verify pass of
K + 1 rows, single rows) is not bitwise the same: llama.cpp's CPU matmuls choose their kernels
and their order of summation by batch size and by the host's SIMD width (AVX2, AVX-512, NEON),
so float32 rounding differs. Seen on two x86-64 hosts of the CI machine kind: up to 1.2e-3
absolute on the tiny models' logits, whose largest magnitude is about 10. A cache that kept a
rejected token, lost an accepted one or read the wrong hidden row moves them by O(1).

So the bounds sit between the two, scaled by the logits' own size, and every comparison that
can says so: `wrong` is an evaluation of a *broken* state, which must land far outside the
bound, or the test could not tell a bug from rounding.
"""

from __future__ import annotations

import numpy as np

LOGIT_RTOL = 0.005
"""Cross-shape logit differences, as a fraction of the largest |logit|: 0.5 %, about 40 times
the rounding seen (1.2e-3 of ~10), and still a fifth or less of what a cache that lost one
token some positions back does (1.5 on logits of ~18: test_engine)."""
SEPARATION = 5.0
"""A broken state must differ by at least this many bounds."""
DIST_TV = 0.01
"""Total variation between two evaluations of one distribution. A relative logit error e
changes each probability by about e·|logit|/T of itself; 1.2e-3 at T = 1 gives ~0.1 % of the
mass, and a head fed the wrong row gives a different distribution (TV ~ 0.3 and more)."""
DIST_TV_BATCH_VARIANT = 0.05
"""The same on a backend whose rounding depends on the batch (CUDA): on an H200 (2026-11-27,
docs/BENCHMARKS.md) one context's rows from passes of different widths differed by up to 0.033
nats on logits of ~16, which moves a T = 1 distribution by a TV of about as much; 0.05 is 1.5
times that and still a sixth of what a head fed the wrong row does."""


def logit_bound(expected: np.ndarray) -> float:
    return LOGIT_RTOL * max(float(np.max(np.abs(expected))), 1.0)


def assert_same_evaluation(actual: np.ndarray, expected: np.ndarray, wrong: np.ndarray | None = None) -> None:
    """`actual` and `expected` are one context's logits from two paths; `wrong`, if given, the
    logits of a state a bug would leave (it must be told apart from rounding)."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    bound = logit_bound(expected)
    diff = float(np.max(np.abs(actual - expected)))
    assert diff <= bound, f"logits differ by {diff:.3g}, beyond rounding across batch shapes ({bound:.3g})"
    top2 = np.sort(expected.ravel())[-2:]
    if top2[1] - top2[0] > 2 * bound:  # no near-tie: the greedy token must be the same
        assert int(np.argmax(actual)) == int(np.argmax(expected))
    if wrong is not None:
        off = float(np.max(np.abs(np.asarray(wrong, dtype=np.float64) - expected)))
        assert off > SEPARATION * bound, f"a broken state is only {off:.3g} off: the bound {bound:.3g} proves nothing"


def total_variation(a: np.ndarray, b: np.ndarray) -> float:
    return 0.5 * float(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)).sum())


def dist_tv_bound() -> float:
    return DIST_TV if batch_invariant_backend() else DIST_TV_BATCH_VARIANT


def assert_same_distribution(got: np.ndarray, want: np.ndarray) -> None:
    """Two dense evaluations of one next-token distribution (e.g. a head's q after rollbacks
    and from a fresh head)."""
    tv, bound = total_variation(got, want), dist_tv_bound()
    assert tv <= bound, f"distributions differ by TV {tv:.3g}, beyond rounding ({bound})"


def assert_same_proposal(got, want, n_vocab: int, *, exact: bool | None = None) -> int | None:
    """Two proposals (`tokens`, `dists`) drawn with one seed from drafters whose states must be
    the same: the same tokens and, position by position, the same distributions within rounding.
    Where rounding depends on the batch (a GPU), a draw that lands within the rounding of a
    boundary between two tokens may take the other one (an inverse-CDF draw over tokens ordered
    by probability: two near-equal ones can even swap places), so the tokens may part at some
    position; every distribution up to and including it must still be the same. `exact` (default:
    on a batch-invariant backend) fails any parting. Returns where the tokens part, or None."""
    part = next((i for i, (a, b) in enumerate(zip(got.tokens, want.tokens, strict=False)) if a != b), None)
    upto = len(want.tokens) if part is None else part + 1
    for i in range(upto):
        assert_same_distribution(got.dists[i].dense(n_vocab), want.dists[i].dense(n_vocab))
    if part is None:
        assert len(got.tokens) == len(want.tokens), (got.tokens, want.tokens)
        return None
    tv = total_variation(got.dists[part].dense(n_vocab), want.dists[part].dense(n_vocab))
    line = (f"the proposals part at position {part} ({got.tokens[part]} vs {want.tokens[part]}), "
            f"where the distributions differ by TV {tv:.3g}")
    print(line)
    if exact is None:
        exact = batch_invariant_backend()
    assert not exact, f"{line}; on this backend a state restored must draw the same tokens"
    return part


# ----- greedy replies across passes of different widths: the near-tie promise -------------------
#
# The step's decisions are exact against the logits it was given; where a greedy reply leaves
# speculation-off's text, it is at a near-tie: speculation-off read that position's logits from a
# 1-row pass, the speculative reply from a row of a wider verify pass, the two rows differ by
# rounding (within `logit_bound`), and on that rounding the two best tokens changed places. A
# divergence anywhere else (rows further apart than rounding, or a token that is not its row's
# argmax) is a bug. On a backend whose results do not depend on the batch (the CPU here) the
# replies must be identical; on a GPU (cuBLAS rounds a multi-row product through TF32 tensor
# cores, a 1-row product in float32) divergences at near-ties are expected and reported.

NEAR_TIE_LOG = "SPECTUI_NEAR_TIE_LOG"
"""Environment: a file each checked divergence is appended to, one JSON line (gpu_check.sh)."""


class RowRecorder:
    """Every logits row a target returned, keyed by the context it followed (a copy: llama.cpp
    reuses its output buffer). Wraps the target's `extend` and `verify_tree` on the instance.
    The first row for a context is kept: that is the one a decision was made on (a context is
    scored again only where a cache re-reads tokens it already kept)."""

    def __init__(self, target) -> None:
        self.target = target
        self.rows: dict[tuple[int, ...], np.ndarray] = {}
        self._extend, self._verify_tree = target.extend, getattr(target, "verify_tree", None)
        target.extend = self._record_extend
        if self._verify_tree is not None:
            target.verify_tree = self._record_tree

    def _record_extend(self, tokens, n_logits: int = 1):
        rows = self._extend(tokens, n_logits)
        cached = list(self.target.cached)
        for j in range(n_logits):
            self.rows.setdefault(tuple(cached[: len(cached) - n_logits + 1 + j]), np.array(rows[j], dtype=np.float32))
        return rows

    def _record_tree(self, tokens, parents):
        base = list(self.target.cached)
        rows = self._verify_tree(tokens, parents)
        for i in range(len(tokens)):
            path, node = [], i
            while node >= 0:
                path.append(tokens[node])
                node = parents[node]
            self.rows.setdefault(tuple(base + path[::-1]), np.array(rows[i], dtype=np.float32))
        return rows

    def close(self) -> None:
        self.target.extend = self._extend
        if self._verify_tree is not None:
            self.target.verify_tree = self._verify_tree

    def __enter__(self) -> RowRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def batch_invariant_backend() -> bool:
    """True where llama.cpp computes on the CPU alone (this suite's tiny models go to a GPU by
    default when the build has one): there a reply must not change with the passes' widths."""
    from spectui.engine.llama.build_info import read_build_info

    return not read_build_info().gpu_offload


def check_decisions(rows: dict[tuple[int, ...], np.ndarray], prompt, tokens) -> None:
    """Each greedy token is the argmax of the row it was decided on (the last row recorded for
    its context: a re-read after a rollback replaces the one before)."""
    context = list(prompt)
    for i, token in enumerate(tokens):
        row = rows.get(tuple(context))
        assert row is not None, f"no logits were recorded for token {i}'s context"
        best = int(np.argmax(row))
        assert token == best, (f"token {i}: the step chose {token} but its row's argmax is {best} "
                               f"({row[token]:.6g} vs {row[best]:.6g}): a decision not exact against its logits")
        context.append(token)


def assert_same_or_near_tie(prompt, baseline, base_rows, spec, spec_rows, *, exact: bool | None = None,
                            label: str = "") -> dict | None:
    """`spec` (a greedy speculative reply's tokens) is `baseline` (speculation off), or leaves it
    at a near-tie. Both runs' rows were recorded (RowRecorder). `exact`: a divergence fails
    whatever its margin (default: on a batch-invariant backend). Returns the divergence's report
    (also printed, and appended to $SPECTUI_NEAR_TIE_LOG), or None when the replies are the same."""
    import json
    import os

    baseline, spec = list(baseline), list(spec)
    check_decisions(base_rows, prompt, baseline)
    check_decisions(spec_rows, prompt, spec)
    n = next((i for i, (a, b) in enumerate(zip(baseline, spec, strict=False)) if a != b), None)
    if n is None:
        assert len(spec) == len(baseline) or not (spec and baseline), \
            f"{label}: one reply is a prefix of the other ({len(spec)} vs {len(baseline)} tokens) without a divergence"
        return None
    context = tuple(prompt) + tuple(baseline[:n])
    one, wide = base_rows[context].astype(np.float64), spec_rows[context].astype(np.float64)
    a, b = baseline[n], spec[n]
    bound = logit_bound(one)
    report = {"label": label, "position": n, "tokens": [a, b], "bound": bound,
              "rounding": float(np.max(np.abs(wide - one))),
              "margin_1row": float(one[a] - one[b]), "margin_verify_row": float(wide[b] - wide[a]),
              "largest_logit": float(np.max(np.abs(one)))}
    line = (f"{label}: the reply leaves speculation-off's at token {n}: {a} (1-row pass, ahead by "
            f"{report['margin_1row']:.3g}) vs {b} (verify pass, ahead by {report['margin_verify_row']:.3g}); "
            f"the two rows differ by at most {report['rounding']:.3g} (rounding bound {bound:.3g})")
    print(line)
    if os.environ.get(NEAR_TIE_LOG):
        with open(os.environ[NEAR_TIE_LOG], "a", encoding="utf-8") as log:
            log.write(json.dumps(report) + "\n")
    if exact is None:
        exact = batch_invariant_backend()
    assert not exact, f"{line}; on this backend the reply must not change with the pass's width"
    assert report["rounding"] <= bound, f"{line}: beyond rounding, the rows are not one evaluation"
    assert report["margin_1row"] <= 2 * bound, f"{line}: not a near-tie"
    return report


class GreedyReference:
    """Speculation-off's greedy reply to one prompt, its rows recorded, to hold speculative
    replies to: `check` runs one (`reply()` returns an object with `tokens` and `text`) and
    asserts it is the same (text too), or leaves it only at a near-tie (`assert_same_or_near_tie`)."""

    def __init__(self, target, prompt, reply, label: str = "") -> None:
        self.target, self.prompt, self.label = target, list(prompt), label
        with RowRecorder(target) as recorder:
            self.result = reply()
        self.rows = recorder.rows
        check_decisions(self.rows, self.prompt, self.result.tokens)

    @property
    def tokens(self):
        return self.result.tokens

    @property
    def text(self) -> str:
        return self.result.text

    def check(self, reply, label: str = ""):
        with RowRecorder(self.target) as recorder:
            result = reply()
        report = assert_same_or_near_tie(self.prompt, self.result.tokens, self.rows, result.tokens, recorder.rows,
                                         label=f"{self.label} {label}".strip())
        if report is None:
            assert result.text == self.result.text
        return result

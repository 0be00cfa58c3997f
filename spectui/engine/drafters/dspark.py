"""The DSpark drafter: a DFlash head with a Markov head chained over the block.

A DSpark head (arch `dflash`, with `markov_w1` / `markov_w2`: src/models/dflash.cpp
`build_dspark_markov_head`) is a DFlash head whose graph adds to each block row a bias from the
token drafted before it: row i's logits are base_i + s * W2 W1[prev_i], with prev_0 the anchor
(`last`) and prev_{i+1} = argmax(row i), a greedy chain computed inside the graph. The layout is
anchor-first (`dflash.sample_from_anchor`, default true): the block is [last, MASK, ...] of k
entries at n .. n + k - 1 and row i names the token at n + 1 + i, so a block of `block_size`
drafts `block_size` tokens (speculative.cpp:1022-1031, 1228-1262). Without the anchor-first layout
row 0 passes through and rows 1..k draft, as in DFlash.

**q, the distribution each token is drawn from.** d_i is drawn from

    q_i = softmax( row_i + s * W2 (W1[d_{i-1}] - W1[g_{i-1}]) )    (after the reply's processing)

where row_i is the graph's output and g_{i-1} = argmax(row_{i-1}) the token the graph chained on
(d_{-1} = g_{-1} = the anchor): that is, base_i + the Markov bias of the token actually drafted
before it. At T = 0, d_{i-1} = g_{i-1} and the correction vanishes, so the draft is llama.cpp's
token for token. At T > 0 the draft is a chain: q_i depends on the context and on d_{<i}, and the
step's rejection sampling, which accepts d_i with min(1, p_i(d_i) / q_i(d_i)) given the tokens
before it, is exact for any such proposal as long as it reports the q it drew from. Not
correcting (drawing from row_i after a non-argmax d_{i-1}) would also be exact but pay the chain
for a token it did not draft; the correction costs one n_vocab x rank product per such row, on the
weights read once from the GGUF (`MarkovHead`).

**Confidence.** A head with a confidence head (`conf_proj`: dflash.cpp:305, 369-387) outputs, per
row, sigmoid(conf_proj . [the row's pre-norm state; W1[prev]] + b), trained to predict that row's
acceptance, in every column of the row's `t_h_nextn`; llama.cpp stops a draft at the first row
below p_min (speculative.cpp:1212-1220). At T = 0 spectui takes it as the draft's confidence, so
p_min stops where llama.cpp's would and K = auto calibrates it like any confidence; without one,
confidence is the row's top probability, as for DFlash. When sampling, confidence is 1.0 as for
every network drafter (`model.choose`): the head scores the greedy chain, not a sampled one.

Everything else (the block, following the target, injecting its features, rollback) is DFlash's
(`dflash.DFlashDrafter`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from spectui.engine.drafters.dflash import DFlashDrafter, build_head
from spectui.engine.drafters.feature_head import FeatureHeadContext, not_this_head
from spectui.engine.drafters.model import NOTHING_ALLOWED, choose
from spectui.engine.drafters.spec import BuildContext, DrafterSpec
from spectui.engine.drafters.taps import FeatureTaps
from spectui.engine.files.heads import HeadFacts
from spectui.engine.generation_config import SamplingConfig
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.step.drafter import Budget, Proposal
from spectui.engine.step.sampling import Dist
from spectui.errors import ModelLoadError

SOURCE = "dspark"


def _dequantize(tensor: object, row: int | None = None) -> np.ndarray:
    """A `gguf.ReaderTensor` (or one of its rows) as float32, numpy shape = llama.cpp's ne reversed:
    a row of a quantized tensor is whole blocks, so a row dequantizes on its own."""
    import gguf

    assert isinstance(tensor, gguf.ReaderTensor)
    raw = tensor.data if row is None else tensor.data[row]
    data = np.asarray(gguf.quants.dequantize(raw, tensor.tensor_type), dtype=np.float32)
    shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
    return data.reshape(shape if row is None else shape[-1])


class MarkovHead:
    """W1, W2 (and W2's scale, and a reduced vocabulary's d2t) of a DSpark head, for the bias
    difference between two previous tokens. Read lazily from the file: W1 a row at a time, W2
    (n_vocab x rank, float32 on the host) at the first correction, so greedy drafting copies
    nothing."""

    def __init__(self, w1: Callable[[int], np.ndarray], w2: Callable[[], np.ndarray], scale: float = 1.0,
                 d2t: np.ndarray | None = None, n_vocab: int = 0) -> None:
        self._w1, self._load_w2 = w1, w2
        self._w2: np.ndarray | None = None
        self.scale = scale
        self.d2t = d2t.astype(np.int64) if d2t is not None else None
        self.n_vocab = n_vocab

    @classmethod
    def from_arrays(cls, w1: np.ndarray, w2: np.ndarray, scale: float = 1.0, d2t: np.ndarray | None = None,
                    n_vocab: int | None = None) -> MarkovHead:
        return cls(lambda t: w1[t], lambda: w2, scale, d2t, w2.shape[0] if n_vocab is None else n_vocab)

    @classmethod
    def read(cls, path: Path, n_vocab: int) -> MarkovHead:
        import gguf

        tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
        w1, w2 = tensors.get("markov_w1.weight"), tensors.get("markov_w2.weight")
        if w1 is None or w2 is None:
            raise ModelLoadError(f"{path.name} has no Markov head (markov_w1 / markov_w2); it is not a DSpark head")
        scale, d2t = tensors.get("markov_w2.scale"), tensors.get("d2t")
        return cls(lambda t: _dequantize(w1, t), lambda: _dequantize(w2),
                   float(_dequantize(scale).reshape(-1)[0]) if scale is not None else 1.0,
                   np.asarray(d2t.data) if d2t is not None else None, n_vocab)

    @property
    def w2(self) -> np.ndarray:
        if self._w2 is None:
            self._w2 = self._load_w2()
        return self._w2

    def w1(self, token: int) -> np.ndarray:
        return self._w1(token)

    def _scatter(self, draft: np.ndarray) -> np.ndarray:
        if self.d2t is None:
            return draft
        full = np.zeros(self.n_vocab, dtype=np.float32)
        full[self.d2t] = draft
        return full

    def bias(self, prev: int) -> np.ndarray:
        """The graph's bias for the row after `prev`, over the target's vocabulary."""
        return self._scatter(self.scale * (self.w2 @ self.w1(prev)))

    def shift(self, chained: int, drafted: int) -> np.ndarray:
        """What to add to a row the graph chained on `chained` to chain it on `drafted`."""
        return self._scatter(self.scale * (self.w2 @ (self.w1(drafted) - self.w1(chained))))


class DSparkDrafter(DFlashDrafter):
    """Proposes a block from a DSpark head: each row's q conditioned on the token drafted before."""

    source = SOURCE

    def __init__(self, target: LlamaModel, model: LlamaModel, head: FeatureHeadContext, taps: FeatureTaps,
                 facts: HeadFacts, markov: MarkovHead) -> None:
        super().__init__(target, model, head, taps, facts)
        self.markov = markov
        self.first_row = 0 if facts.sample_from_anchor else 1  # anchor-first: row 0 drafts the token at n + 1
        self.confidence_head = facts.confidence_head
        self._confidence = np.zeros(0, dtype=np.float32)
        """The last block's confidence per row, from the confidence head."""

    def read_block(self, proposal: Proposal, k: int, context: Sequence[int], budget: Budget,
                   cfg: SamplingConfig, rng: np.random.Generator) -> None:
        if self.confidence_head:
            self._confidence = self.head.hidden(self.first_row + k)[:, 0]
        super().read_block(proposal, k, context, budget, cfg, rng)

    def choose_row(self, i: int, previous: Sequence[int], cfg: SamplingConfig, rng: np.random.Generator,
                   p_min: float) -> tuple[int, Dist | None, float]:
        """Row i chained on the token drafted before it: the graph chained it on the previous
        row's argmax (the anchor for the first drafting row), so a different token shifts it."""
        row = self.head.logits(i)
        chained = previous[0] if i == self.first_row else int(np.argmax(self.head.logits(i - 1)))
        drafted = previous[-1]
        logits = row if drafted == chained else row + self.markov.shift(chained, drafted)
        if not (self.confidence_head and cfg.greedy):
            return choose(logits, cfg, rng, p_min)
        token, dist, confidence = choose(logits, cfg, rng, 0.0)  # the head's own confidence instead
        return token, dist, confidence if confidence == NOTHING_ALLOWED else float(self._confidence[i])


# ----- what the registry asks of this kind ------------------------------------------------------


def unavailable(spec: DrafterSpec, ctx: BuildContext) -> str | None:
    return not_this_head(spec, SOURCE)


def build(spec: DrafterSpec, ctx: BuildContext) -> DSparkDrafter:
    model, head, taps, facts = build_head(spec, ctx)
    try:
        markov = MarkovHead.read(model.path, head.n_vocab)
        return DSparkDrafter(ctx.target, model, head, taps, facts, markov)
    except BaseException:
        taps.close()
        head.close()
        model.close()
        raise

"""Automatic pairing: for a target on disk, the local drafts that fit, best first, and why others do not.

A candidate must be at most half the target's size (a larger draft costs more than it saves)
and pass llama.cpp's vocabulary rule (checked on fingerprints, `spectui.catalog.local.vocab`).
Compatible drafts are ranked by an expected speed-up: decoding is memory-bound, so a draft pass
costs about `c` = draft bytes / target bytes of a target pass, and with a per-token acceptance
`a` a draft of K tokens yields (1 - a^(K+1)) / ((1 - a)(1 + K c)) times the plain speed. `a` is
a guess from the relation: 0.75 for the same family (`general.basename`), 0.6 for the same
architecture, 0.5 otherwise; K = 4. The estimate only orders candidates; K = auto measures.
A target carrying MTP heads needs no separate draft: they come first. An EAGLE-3, DFlash, DSpark
or DFlash2 head on disk that fits the target (`spectui.engine.files.heads.misfit`: its width, its layers,
the tokenizer) comes before any draft model: it was trained on that target's own hidden states.
Where several heads could draft (the target's own MTP heads among them), `auto` runs the one
measured fastest on this machine (`head_speeds`: each is measured once, by the calibration of the
load that runs it), llama-server's order only breaking ties.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from spectui.catalog.local.discover import Discovery, LocalModel, describe_path, discover
from spectui.catalog.local.index import LocalIndex
from spectui.catalog.local.vocab import VocabChecker
from spectui.engine.files.archs import FEATURE_HEAD_ARCHS
from spectui.engine.files.heads import KIND_NAMES
from spectui.errors import SpectuiError

ESTIMATE_K = 4
ACCEPTANCE_GUESS = {"family": 0.75, "arch": 0.6, "other": 0.5}
MAX_DRAFT_RATIO = 0.5
"""Largest draft size / target size offered: beyond it the draft's passes eat the gain."""
SUGGEST_FROM_PARAMETERS = 1_000_000_000
"""Below this a target is a draft itself: no catalog draft is suggested for it."""


@dataclass(frozen=True)
class DraftChoice:
    """A compatible local draft and its expected pay-off."""

    model: LocalModel
    estimate: float
    relation: str
    """`same family`, `same architecture` or `same tokenizer`."""
    ratio: float
    """Draft size / target size."""

    def describe(self) -> str:
        return f"{self.model.reference} ({self.relation}, {self.ratio:.0%} of the target's size)"


@dataclass(frozen=True)
class Refusal:
    """A local model that cannot draft for this target, and the one-line reason."""

    model: LocalModel
    reason: str
    larger: bool = False
    """True when refused only for not being smaller than the target (not worth showing)."""


@dataclass
class Pairing:
    """A target's drafts (best first), its refused candidates, and a catalog suggestion."""

    target: LocalModel
    drafts: list[DraftChoice] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    suggestion: str | None = None

    @property
    def mtp_layers(self) -> int:
        return self.target.info.mtp_layers

    @property
    def best(self) -> DraftChoice | None:
        return self.drafts[0] if self.drafts else None

    def best_for(self, kind: str) -> DraftChoice | None:
        """The best file for drafter `kind`: an `eagle3`, `dflash`, `dspark` or `dflash2` head, a
        draft `model` (or a chain with one), or under `auto` whatever ranks first."""
        members = set(kind.split("+"))
        for draft in self.drafts:
            if kind == "auto" or draft.model.info.drafter in members:
                return draft
        return None

    def as_json(self) -> dict[str, object]:
        return {
            "target": self.target.reference,
            "mtp_layers": self.mtp_layers,
            "drafts": [{"reference": d.model.reference, "path": str(d.model.path), "relation": d.relation,
                        "size_ratio": round(d.ratio, 4), "estimated_speedup": round(d.estimate, 2)}
                       for d in self.drafts],
            "refused": [{"reference": r.model.reference, "reason": r.reason} for r in self.refused],
            "suggestion": self.suggestion,
        }


def estimated_speedup(ratio: float, acceptance: float, k: int = ESTIMATE_K) -> float:
    expected_tokens = (1 - acceptance ** (k + 1)) / (1 - acceptance)
    return expected_tokens / (1 + k * ratio)


def family(model: LocalModel) -> str | None:
    """The family as published (`general.basename`), lower case, or None when unknown."""
    base = model.info.basename
    return re.sub(r"[\s_]+", "-", base.strip().lower()) if base else None


def relation(target: LocalModel, draft: LocalModel) -> str:
    fam = family(target)
    if fam is not None and fam == family(draft):
        return "same family"
    return "same architecture" if target.info.arch == draft.info.arch else "same tokenizer"


def _choice(target: LocalModel, draft: LocalModel) -> DraftChoice:
    rel = relation(target, draft)
    guess = {"same family": "family", "same architecture": "arch"}.get(rel, "other")
    ratio = draft.size / target.size if target.size else 1.0
    return DraftChoice(draft, estimated_speedup(ratio, ACCEPTANCE_GUESS[guess]), rel, ratio)


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"


def pair_target(target: LocalModel, candidates: list[LocalModel], checker: VocabChecker) -> Pairing:
    """Check every candidate against `target`; drafts ranked by expected pay-off."""
    pairing = Pairing(target)
    try:
        checker.fingerprint(target.path)
    except SpectuiError as error:
        pairing.suggestion = f"llama.cpp cannot read the target's vocabulary: {error}"
        return pairing
    for draft in candidates:
        if draft.key == target.key:
            continue
        if draft.info.kind == "head":
            _pair_head(pairing, target, draft, checker)
            continue
        if draft.size >= target.size:
            reason = f"not smaller than the target ({_gb(draft.size)} vs {_gb(target.size)})"
            pairing.refused.append(Refusal(draft, reason, larger=True))
            continue
        try:
            mismatch = checker.mismatch(target.path, draft.path)
        except SpectuiError as error:
            pairing.refused.append(Refusal(draft, f"llama.cpp cannot read its vocabulary: {error}"))
            continue
        if mismatch is not None:
            pairing.refused.append(Refusal(draft, f"tokenizer differs: {mismatch}"))
        elif draft.size > MAX_DRAFT_RATIO * target.size:
            reason = f"too large to pay off ({draft.size / target.size:.0%} of the target's size)"
            pairing.refused.append(Refusal(draft, reason))
        else:
            pairing.drafts.append(_choice(target, draft))
    # heads first, in the order measured on this machine; then by pay-off (stable: ties keep store order)
    pairing.drafts.sort(key=lambda d: (d.model.info.kind != "head", -d.estimate, d.model.size))
    heads = [d for d in pairing.drafts if d.model.info.kind == "head"]
    if len(heads) > 1:
        from spectui.catalog.local.head_speeds import Candidate, measured_for, order

        ranked = order([Candidate(d.model.path, d.model.info.drafter) for d in heads], measured_for(target.path))
        pairing.drafts[: len(heads)] = [heads[i] for i in ranked]
    if not pairing.drafts and target.parameters >= SUGGEST_FROM_PARAMETERS:
        pairing.suggestion = catalog_suggestion(target)
    return pairing


def _pair_head(pairing: Pairing, target: LocalModel, head: LocalModel, checker: VocabChecker) -> None:
    """An EAGLE-3 / DFlash head drafts for `target` when its shape and its tokenizer fit."""
    from spectui.engine.files.heads import misfit

    assert head.info.head is not None
    why = misfit(head.info.head, target.info.target_facts(), "it", "the target")
    if why is None:
        try:
            mismatch = checker.mismatch(target.path, head.path)
        except SpectuiError as error:
            mismatch = f"llama.cpp cannot read its vocabulary: {error}"
        why = None if mismatch is None else f"tokenizer differs: {mismatch}"
    if why is not None:
        pairing.refused.append(Refusal(head, why))
        return
    ratio = head.size / target.size if target.size else 1.0
    relation = f"{KIND_NAMES.get(head.info.drafter, FEATURE_HEAD_ARCHS[head.info.arch])} head"
    pairing.drafts.append(DraftChoice(head, estimated_speedup(ratio, ACCEPTANCE_GUESS["family"]), relation, ratio))


def pair_all(discovery: Discovery, index: LocalIndex) -> list[Pairing]:
    """Every discovered model as a target (a draft head is never one), against every other one."""
    with VocabChecker(index) as checker:
        return [pair_target(model, discovery.models, checker) for model in discovery.models
                if model.info.kind != "head"]


def _family_hint(target: LocalModel) -> str | None:
    if target.info.basename:
        return family(target)
    if target.source == "ollama":  # `qwen2.5:7b` -> `qwen2.5`
        return target.name.split("/")[-1].split(":")[0].lower()
    return None


def catalog_suggestion(target: LocalModel) -> str | None:
    """The catalog draft to pull for this target's family, as a command line; None if none fits."""
    from spectui.catalog.loader import load_catalog

    hint = _family_hint(target)
    if not hint:
        return None
    size = (target.info.size_label or "").lower()
    matches = []
    for name, item in load_catalog().items():
        entry = item.entry
        if entry.target is None or entry.draft is None:
            continue
        repo = entry.target.repo.split("/")[-1].lower()
        if repo.startswith(hint) and repo[len(hint) : len(hint) + 1] in ("", "-", "_"):
            matches.append((size not in repo if size else True, name, entry))
    if not matches:
        return None
    _, name, entry = min(matches, key=lambda m: (m[0], m[1]))
    assert entry.draft is not None
    draft = f"{entry.draft.repo}:{entry.draft.files[0]}"
    return (f"the catalog drafts this family with {draft}: `spectui pull --target {target.reference} "
            f"--draft {draft} --name {name}-local` downloads only the draft")


def _label(model: LocalModel) -> str:
    return model.reference if model.source != "file" else model.path.name


def auto_draft_for(target_path: Path, *, mtp_supported: bool = False, kind: str = "auto") -> tuple[Path | None, str]:
    """The best local draft for `target_path` (for drafter `kind`: a head for `eagle3`/`dflash`)
    and a one-line message saying what was chosen.

    (None, why) when nothing on disk fits (the message then names the catalog draft to pull), or
    when the target carries MTP heads and `mtp_supported` (the engine drafts with them).
    """
    from spectui.engine.files.gguf_file import check_readable

    check_readable(target_path)  # a missing or non-GGUF target: the loader's own one-line error
    index = LocalIndex()
    try:
        found = discover(index=index)
        target = found.find(target_path) or describe_path(target_path, index)
        if not isinstance(target, LocalModel):
            return None, f"no automatic draft for {target_path.name}: {target.reason}"
        if target.info.kind == "head":
            from spectui.engine.files.heads import check_not_a_head

            check_not_a_head(target_path)  # raises its one line
        with VocabChecker(index) as checker:
            pairing = pair_target(target, found.models, checker)
    finally:
        index.save()
    measured = measured_choice(pairing, kind, mtp_supported=mtp_supported)
    if measured is not None:
        head, why = measured
        if head is None:
            return None, f"{auto_message(pairing, mtp_supported=mtp_supported, kind=kind)}: {why}"
        return head.model.path, auto_message(pairing, mtp_supported=mtp_supported, kind=kind, best=head, why=why)
    heads = kind == "auto" and mtp_supported and runs_own_heads(pairing)
    best = pairing.best_for(kind)
    chosen = None if heads or best is None else best.model.path
    return chosen, auto_message(pairing, mtp_supported=mtp_supported, kind=kind)


def measured_choice(pairing: Pairing, kind: str, *, mtp_supported: bool) -> tuple[DraftChoice | None, str] | None:
    """Where several heads could draft for kind `kind` (`auto`: every fitting head, and the
    target's own MTP heads), the one measured fastest on this machine (`head_speeds.choose`) and
    why; its draft is None for the target's own MTP heads. None when there is no choice to make."""
    from spectui.catalog.local.head_speeds import Candidate, choose, measured_for

    members = set(kind.split("+"))
    if "model" in members:
        return None
    heads = [d for d in pairing.drafts
             if d.model.info.kind == "head" and (kind == "auto" or d.model.info.drafter in members)]
    own = kind == "auto" and mtp_supported and runs_own_heads(pairing)
    candidates = [Candidate(None, "mtp")] if own else []
    candidates += [Candidate(d.model.path, d.model.info.drafter) for d in heads]
    if len(candidates) < 2:
        return None
    picked = choose(candidates, measured_for(pairing.target.path))
    return (None if own and picked.index == 0 else heads[picked.index - own]), picked.reason


def runs_own_heads(pairing: Pairing) -> bool:
    """The target carries one MTP head of an architecture llama.cpp can draft with."""
    from spectui.engine.files.archs import MTP_HEAD_ARCHS

    return pairing.mtp_layers == 1 and pairing.target.info.arch in MTP_HEAD_ARCHS


def auto_message(pairing: Pairing, *, mtp_supported: bool, kind: str = "auto", best: DraftChoice | None = None,
                 why: str = "") -> str:
    """What `auto` picked for the target and why, one line (`best`, `why`: a measured choice)."""
    label = _label(pairing.target)
    if best is None and kind == "auto" and mtp_supported and runs_own_heads(pairing):
        return f"{label} drafts with its own MTP heads ({pairing.mtp_layers} layer(s)); no separate draft needed"
    own = kind == "auto" and mtp_supported and runs_own_heads(pairing)
    mtp = f"; its {pairing.mtp_layers} MTP layer(s) are not used yet" if pairing.mtp_layers and not own else ""
    best = best or pairing.best_for(kind)
    if best is not None:
        because = f", {why}" if why else ""
        return (f"draft for {label}: {best.describe()}, picked automatically from "
                f"{len(pairing.drafts)} compatible on disk{because}{mtp}; --draft REF picks another")
    smaller = [r for r in pairing.refused if not r.larger]
    why = f": {_label(smaller[0].model)}: {smaller[0].reason}" if smaller else ""
    refused = f" ({len(smaller)} smaller model(s) refused{why})" if smaller else ""
    hint = pairing.suggestion or "see `spectui list` for pairs to pull"
    heads = [KIND_NAMES[m] for m in kind.split("+") if m in KIND_NAMES]
    what = f"{heads[0]} head" if heads else "draft"
    return f"no compatible {what} on disk for {label}{refused}; {hint}{mtp}"

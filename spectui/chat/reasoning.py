"""Reasoning in a reply: the model's thinking told apart from its answer, on the text side.

Reasoning models write their thinking before the answer, between markers their chat template
knows:

- `<think>…</think>` (Qwen3, QwQ, DeepSeek-R1 and its distills). Some templates open the block
  in the generation prompt themselves, so the reply starts inside it with no opening tag;
  Qwen3's, asked not to think, writes an empty block there instead.
- gpt-oss's harmony channels: `<|channel|>analysis<|message|>…<|end|>` then
  `<|start|>assistant<|channel|>final<|message|>…`. llama.cpp renders `<|channel|>`,
  `<|message|>` and `<|start|>` as text (it marks them USER_DEFINED, src/llama-vocab.cpp:2932-2941)
  and `<|end|>`, a control token, as nothing (src/llama-vocab.cpp:3664), which it also takes off
  the end-of-generation list so the final channel can follow (src/llama-vocab.cpp:2960-3000).

The engine streams plain text (`TextPiece`); `ReasoningSplitter` cuts it as it streams, hiding
the markers and holding back a tail that may be the start of one. What a template wants back
from earlier turns is read from its source (`reasoning_key`): Qwen3's takes `reasoning_content`
and drops it from turns before the last question itself; gpt-oss's takes `thinking`; templates
that only know the tags get them inline and strip them themselves; any other gets the answer only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["reasoning", "answer"]
Segment = tuple[Kind, str]
ReasoningKey = Literal["reasoning_content", "thinking", "inline", "none"]
ThinkingSwitch = Literal["enable_thinking", "reasoning_effort"]


@dataclass(frozen=True)
class Markers:
    """The strings that move a reply between thinking and answering; all are hidden."""

    to_reasoning: tuple[str, ...]
    to_answer: tuple[str, ...]
    silent: tuple[str, ...] = ()
    """Hidden without a change (harmony's role header before a channel)."""
    open_tag: str = ""
    close_tag: str = ""
    """How to write a reasoning block back into content (`inline` templates)."""

    def all(self) -> tuple[tuple[str, Kind | None], ...]:
        return (*((m, "reasoning") for m in self.to_reasoning), *((m, "answer") for m in self.to_answer),
                *((m, None) for m in self.silent))


THINK_TAGS = Markers(("<think>",), ("</think>",), open_tag="<think>", close_tag="</think>")
HARMONY = Markers(
    to_reasoning=("<|channel|>analysis<|message|>",),
    to_answer=("<|channel|>final<|message|>", "<|channel|>commentary<|message|>"),
    silent=("<|start|>assistant", "<|end|>", "<|return|>"),
)


def markers_for(template: str | None) -> Markers:
    """The markers a model with this chat template writes (think tags unless it speaks harmony)."""
    if template and "<|channel|>" in template:
        return HARMONY
    return THINK_TAGS


def thinking_switch(template: str | None) -> ThinkingSwitch | None:
    """Which variable the template reads to think or not, if any (searched in its source)."""
    if not template:
        return None
    if re.search(r"\benable_thinking\b", template):
        return "enable_thinking"
    if re.search(r"\breasoning_effort\b", template):
        return "reasoning_effort"
    return None


THINKING_FIELD = re.compile(r"""message\.thinking\b|\[\s*['"]thinking['"]\s*\]|['"]thinking['"]\s+in\s+message""")


def reasoning_key(template: str | None) -> ReasoningKey:
    """How earlier replies' reasoning goes back to this template."""
    if not template:
        return "none"
    if "reasoning_content" in template:
        return "reasoning_content"
    if THINKING_FIELD.search(template):
        return "thinking"
    if "</think>" in template:
        return "inline"
    return "none"


@dataclass
class ReasoningSplitter:
    """Cuts streamed text into reasoning and answer segments; the markers never show."""

    markers: Markers | None
    kind: Kind = "answer"
    """Where the text being fed now belongs."""
    consumed: int = 0
    """Characters of the fed text that have been emitted or hidden (the rest is held back)."""
    reasoning_end: int = 0
    """Offset in the fed text just past the last reasoning (0 when there was none)."""
    _pending: str = field(default="", repr=False)

    def feed(self, text: str) -> list[Segment]:
        self._pending += text
        out: list[Segment] = []
        while (hit := self._first_marker()) is not None:
            start, marker, new_kind = hit
            self._emit(out, start)
            self._pending = self._pending[len(marker):]
            self.consumed += len(marker)
            if self.kind == "reasoning" or new_kind == "reasoning":
                self.reasoning_end = self.consumed
            if new_kind is not None:
                self.kind = new_kind
        self._emit(out, len(self._pending) - self._held_back())
        return out

    def flush(self) -> list[Segment]:
        out: list[Segment] = []
        self._emit(out, len(self._pending))
        return out

    def _emit(self, out: list[Segment], end: int) -> None:
        if end <= 0:
            return
        text, self._pending = self._pending[:end], self._pending[end:]
        self.consumed += len(text)
        if self.kind == "reasoning":
            self.reasoning_end = self.consumed
        if out and out[-1][0] == self.kind:
            out[-1] = (self.kind, out[-1][1] + text)
        else:
            out.append((self.kind, text))

    def _first_marker(self) -> tuple[int, str, Kind | None] | None:
        if self.markers is None:
            return None
        found = [(i, m, k) for m, k in self.markers.all() if (i := self._pending.find(m)) >= 0]
        return min(found, key=lambda hit: hit[0]) if found else None

    def _held_back(self) -> int:
        """Length of the longest tail that is a proper prefix of a marker."""
        if self.markers is None:
            return 0
        longest = 0
        for marker, _ in self.markers.all():
            for n in range(min(len(marker) - 1, len(self._pending)), longest, -1):
                if self._pending.endswith(marker[:n]):
                    longest = n
                    break
        return longest


@dataclass(frozen=True)
class Split:
    reasoning: str
    answer: str
    reasoning_end: int
    """Offset in the text just past the reasoning and its closing marker (0: no reasoning)."""


def split_text(text: str, markers: Markers | None, starts_in_reasoning: bool = False) -> Split:
    """A whole reply cut in two (what a stored reply or a finished one holds)."""
    splitter = ReasoningSplitter(markers, "reasoning" if starts_in_reasoning else "answer")
    segments = splitter.feed(text) + splitter.flush()
    reasoning = "".join(t for kind, t in segments if kind == "reasoning")
    answer = "".join(t for kind, t in segments if kind == "answer")
    return Split(reasoning.strip(), answer, splitter.reasoning_end)


def common_prefix_length(first: str, second: str) -> int:
    """How many leading characters the two texts share."""
    length = min(len(first), len(second))
    return next((i for i in range(length) if first[i] != second[i]), length)


def opens_reasoning(generation_prompt: str, markers: Markers | None) -> bool:
    """True when the template's generation prompt leaves a reasoning block open (the reply
    starts inside it, without an opening marker of its own)."""
    splitter = ReasoningSplitter(markers)
    splitter.feed(generation_prompt)
    splitter.flush()
    return splitter.kind == "reasoning"


def count_tokens_through(pieces: Iterable[bytes], text: str, end: int) -> int:
    """How many tokens it took to write `text[:end]`, given each token's bytes in order."""
    limit = len(text[:end].encode("utf-8"))
    count = position = 0
    for piece in pieces:
        if position >= limit:
            break
        count += 1
        position += len(piece)
    return count

"""docs/ARCHITECTURE.md's recipe "Adding a drafter kind", followed literally: the names it lists are
read from the page, a new kind's module is written where it says (a folder added to the drafters
package's path, as if it were `spectui/engine/drafters/<kind>.py`), its `KINDS` line is the page's
own line with the placeholders filled in, and the kind then runs through the real generator on the
tiny generated target: the target's greedy tokens, some of them accepted from the new kind, shown
in the colour its line declares. If the page drifts from the code, this fails."""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
import textwrap
from pathlib import Path

import pytest

from spectui.engine import drafters as registry
from spectui.engine.drafters import KINDS, DrafterKind, DrafterSpec, offered_kinds
from spectui.engine.events import Finished, TextPiece
from spectui.engine.generation_config import DraftControl, GenerationConfig, SamplingConfig
from spectui.engine.generator import load_generator
from spectui.engine.step.drafter import Drafter
from spectui.ui.chat_view import origin_style
from spectui.ui.stats_panel import legend_text

DOC = Path(__file__).resolve().parent.parent / "docs" / "ARCHITECTURE.md"
KIND = "echo"
MODULE = f"""\
'''An example kind from the recipe: proposes what followed the last token's latest earlier occurrence.'''

from spectui.engine.step.drafter import Proposal


class EchoDrafter:
    source = "{KIND}"
    label = "echo lookup"
    max_k = 4

    def prefill(self, context):
        pass

    def propose(self, context, budget, cfg, rng):
        proposal = Proposal(source=self.source)
        tokens = list(context)
        for _ in range(budget.k(self.source)):
            earlier = [i for i in range(len(tokens) - 1) if tokens[i] == tokens[-1]]
            if not earlier:
                break
            tokens.append(tokens[earlier[-1] + 1])
            proposal.add(tokens[-1])
        return proposal

    def feedback(self, result):
        pass

    def reset(self):
        pass

    def close(self):
        pass


def build(spec, ctx):
    return EchoDrafter()
"""
FILLED = {"kind": KIND, "summary": "echo: what followed the last token before (free, no draft)",
          "label": "echo lookup", "colour": "bright_yellow", "family": "echoes", "max_k": "4", "needs": "nothing",
          "rank": "0"}
"""What this kind puts in each placeholder of the recipe's `KINDS` line."""


def recipe() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("**Adding a drafter kind**")
    return text[start:text.index("\n## ", start)]


def listed_members(steps: str) -> list[str]:
    """The drafter members step 1 lists: "whose members are `a`, `b` ... and `z`"."""
    sentence = re.search(r"whose members\s+are (.*?), and a\s+function", steps, re.S)
    assert sentence is not None, "step 1 no longer says which members a drafter has"
    return re.findall(r"`(\w+)`", sentence.group(1))


def kinds_line(steps: str) -> str:
    """Step 2's line for `KINDS`, its placeholders filled in."""
    block = re.search(r"```python\n(.*?)\n\s*```", steps, re.S)
    assert block is not None, "step 2 no longer shows the line to add to KINDS"
    line = textwrap.dedent(block.group(1)).strip()
    unknown = set(re.findall(r"<(\w+)>", line)) - set(FILLED)
    assert not unknown, f"the recipe asks for {unknown}, which this test does not fill in"
    return re.sub(r"<(\w+)>", lambda m: FILLED[m.group(1)], line)


def test_the_recipe_names_every_member_of_the_drafter_protocol_and_every_field_of_a_kind():
    steps = recipe()
    protocol = {name for name in vars(Drafter) if not name.startswith("_")} | set(Drafter.__annotations__)
    assert set(listed_members(steps)) == protocol
    line = kinds_line(steps)
    named = re.findall(r"(\w+)=", line)
    fields = [field.name for field in dataclasses.fields(DrafterKind)]
    assert ["name", "summary", *named] == fields  # two positional, then every other field by name


@pytest.fixture
def echo_kind(tmp_path, monkeypatch):
    """Steps 1 and 2: the module where the recipe puts it, and the recipe's line in `KINDS`."""
    folder = tmp_path / "drafters"
    folder.mkdir()
    (folder / f"{KIND}.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.setattr(registry, "__path__", [*registry.__path__, str(folder)])
    importlib.invalidate_caches()
    kind = eval(kinds_line(recipe()), {"DrafterKind": DrafterKind})  # the page's own line
    assert isinstance(kind, DrafterKind) and kind.name == KIND
    monkeypatch.setitem(KINDS, kind.name, kind)  # type: ignore[index]
    yield kind
    sys.modules.pop(f"{registry.__name__}.{KIND}", None)


def test_a_kind_added_by_the_recipe_runs_losslessly_and_everything_reads_its_line(tiny_pair, echo_kind):
    steps = recipe()
    gen = load_generator(tiny_pair.target, DrafterSpec(kind=KIND), n_ctx=512)
    try:
        drafter = gen.drafters[KIND]
        assert all(hasattr(drafter, name) for name in listed_members(steps))
        assert KIND in gen.kinds and KIND in offered_kinds(gen.drafters)
        prompt = gen.target.tokenize("one two three one two three one two")
        greedy = GenerationConfig(max_tokens=48, sampling=SamplingConfig(temperature=0.0))
        alone = list(gen.generate(prompt, greedy, DraftControl(0)))
        drafted = list(gen.generate(prompt, greedy, DraftControl(3, drafter=KIND)))
    finally:
        gen.close()
    target_only, with_echo = alone[-1], drafted[-1]
    assert isinstance(target_only, Finished) and isinstance(with_echo, Finished)
    assert list(with_echo.tokens) == list(target_only.tokens)  # lossless: the target's greedy output
    echo = with_echo.stats.by_source.get(KIND)
    assert echo is not None and echo.proposed > 0, "the new kind never proposed"
    assert 0.2 <= echo.acceptance_rate <= 0.9, "a test where every draft is accepted, or none, proves little"
    assert any(isinstance(e, TextPiece) and e.origin == KIND for e in drafted)
    # The app reads the kind's line: its colour for its tokens, its family in the legend.
    assert origin_style(KIND) == echo_kind.colour
    legend = legend_text()
    assert "■ echoes" in legend.plain
    assert any(span.style == echo_kind.colour for span in legend.spans)


def test_a_kind_whose_drafter_contradicts_its_line_is_refused(tiny_pair, echo_kind, monkeypatch):
    monkeypatch.setitem(KINDS, KIND, dataclasses.replace(echo_kind, max_k=2))  # type: ignore[index]
    with pytest.raises(ValueError, match="max_k 4"):
        load_generator(tiny_pair.target, DrafterSpec(kind=KIND), n_ctx=512)

"""The chat's settings, as a modal: system prompt, sampling, reply length, mode, thinking.

Values are checked with the command line's own parsers (`spectui.argtypes`, bounds in
`spectui.limits`): a bad one is named in one line under the form and its field is focused; the
screen closes only with values that are all valid. Enter in a field or Ctrl+S saves, Escape
cancels. Saved settings belong to the chat (the store keeps them) and apply from the next reply.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, TextArea

from spectui import argtypes
from spectui.chat.chat_settings import EFFORTS, ChatSettings
from spectui.chat.reasoning import ThinkingSwitch
from spectui.engine.generation_config import RecommendedSampling
from spectui.safe_text import content

MODES = (("chat: the model's chat template", "chat"), ("completion: continue the text", "completion"))
THINKING = (("on: think before answering", True), ("off: answer at once", False))


@dataclass(frozen=True)
class SettingsResult:
    settings: ChatSettings
    system: str
    """The system prompt ("" for none)."""
    mode: str
    """`chat` or `completion`."""


@dataclass(frozen=True)
class Field:
    """One number field: its id, its label, how it is parsed, and how its value is shown."""

    key: str
    label: str
    parse: Callable[[str], Any]
    blank: str = ""
    """What an empty field means (empty: it must be filled)."""


MODELS = "the model's"
"""An empty sampling field: the value the loaded model recommends (else llama.cpp's default)."""

FIELDS = (
    Field("temperature", "temperature", argtypes.temperature, blank=MODELS),
    Field("top_p", "top-p", argtypes.probability, blank=MODELS),
    Field("top_k", "top-k", argtypes.top_k, blank=MODELS),
    Field("min_p", "min-p", argtypes.probability, blank=MODELS),
    Field("max_tokens", "max tokens", argtypes.max_tokens, blank="default"),
    Field("seed", "seed", argtypes.seed, blank="random"),
)


def shown(value: object) -> str:
    return "" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


class SettingsScreen(ModalScreen[SettingsResult | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "save", "Save"),
    ]

    def __init__(self, settings: ChatSettings, system: str | None, mode: str,
                 switch: ThinkingSwitch | None, recommended: RecommendedSampling | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.recommended = recommended or RecommendedSampling()
        self.system = system or ""
        self.mode = "completion" if mode == "completion" else "chat"
        self.switch = switch

    def compose(self) -> ComposeResult:
        with Vertical(id="settings-dialog"):
            yield Label("Chat settings", id="settings-title")
            yield Label("applied from the next reply · Enter or Ctrl+S saves · Escape cancels",
                        classes="settings-hint")
            yield Label("system prompt", classes="settings-label")
            yield TextArea(self.system, id="system", soft_wrap=True, show_line_numbers=False,
                           tab_behavior="focus")
            for field in FIELDS:
                with Horizontal(classes="settings-row"):
                    yield Label(field.label, classes="settings-label")
                    placeholder = self.placeholder(field)
                    yield Input(shown(getattr(self.settings, field.key)), id=field.key, placeholder=placeholder,
                                compact=True)
            with Horizontal(classes="settings-row"):
                yield Label("mode", classes="settings-label")
                yield Select(MODES, value=self.mode, allow_blank=False, id="mode", compact=True)
            if self.switch == "enable_thinking":
                with Horizontal(classes="settings-row"):
                    yield Label("thinking", classes="settings-label")
                    yield Select(THINKING, value=self.settings.thinking, allow_blank=False, id="thinking",
                                 compact=True)
            elif self.switch == "reasoning_effort":
                with Horizontal(classes="settings-row"):
                    yield Label("reasoning effort", classes="settings-label")
                    yield Select([(e, e) for e in EFFORTS], value=self.settings.reasoning_effort,
                                 allow_blank=False, id="effort", compact=True)
            yield Label("", id="settings-error")
            with Horizontal(id="settings-buttons"):
                yield Button("Save", id="save", variant="primary", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def placeholder(self, field: Field) -> str:
        """What an empty field means; for sampling, the value itself: `empty: 0.8 (llama.cpp's defaults)`."""
        if field.blank == MODELS:
            value = getattr(self.recommended.sampling, field.key)
            return f"empty: {shown(value)} ({self.recommended.origin})"
        return f"empty: {field.blank}" if field.blank else ""

    def on_mount(self) -> None:
        self.query_one("#temperature", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_save()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "save":
            self.action_save()
        else:
            self.action_cancel()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_save(self) -> None:
        values: dict[str, Any] = {}
        for field in FIELDS:
            box = self.query_one(f"#{field.key}", Input)
            text = box.value.strip()
            if not text and field.blank:
                values[field.key] = None
                continue
            try:
                values[field.key] = field.parse(text)
            except argparse.ArgumentTypeError as error:
                # Content: the error quotes what was typed, which is text, not markup ("[/x]")
                self.query_one("#settings-error", Label).update(content(f"{field.label}: {error}"))
                box.focus()
                return
        if self.switch == "enable_thinking":
            values["thinking"] = self.query_one("#thinking", Select).value
        elif self.switch == "reasoning_effort":
            values["reasoning_effort"] = self.query_one("#effort", Select).value
        settings = self.settings.model_copy(update=values)
        system = self.query_one("#system", TextArea).text.strip()
        mode = str(self.query_one("#mode", Select).value)
        self.dismiss(SettingsResult(ChatSettings.model_validate(settings.model_dump()), system, mode))

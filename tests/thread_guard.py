"""A guard that records every engine call made on the UI thread (#28).

The app's promise: the UI thread never blocks on llama.cpp or on the engine's file and network
checks; the workers make those calls and post messages. `EngineCallGuard` wraps, for as long as it
is active,
- every `llama_*`/`ggml_*` function of the `llama_cpp` package (the one namespace spectui calls
  llama.cpp through: `llama_cpp.llama_decode(...)`, read at call time), and
- every method and property of the engine's own classes the app holds (`Generator`,
  `LlamaModel` with its vocabulary and tree-cache mixins, `EngineSession`): a metadata read, a
  file check, an RPC poll or a close is an engine call even where it reaches no llama.cpp function,
and records a call made on the thread it was started on (the test's event loop, which runs the
app), with the frames that made it. It records rather than raises: an exception inside the app
would turn a clear report into a crash somewhere else.
"""

from __future__ import annotations

import functools
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import pytest

from spectui.engine.generator import Generator
from spectui.engine.model.llama_model import LlamaModel
from spectui.engine.model.tree_cache import TreeCache
from spectui.engine.model.vocab import ModelVocabulary
from spectui.session.loaded import EngineSession

ENGINE_CLASSES: tuple[type, ...] = (Generator, LlamaModel, ModelVocabulary, TreeCache, EngineSession)


@dataclass
class EngineCallGuard:
    ui_thread: int = field(default_factory=threading.get_ident)
    violations: list[str] = field(default_factory=list)
    calls_off_ui: int = 0
    """Engine calls made on other threads (the guard saw the engine work at all)."""

    def install(self, monkeypatch: pytest.MonkeyPatch) -> EngineCallGuard:
        for name in dir(llama_cpp):
            value = getattr(llama_cpp, name)
            if name.startswith(("llama_", "ggml_")) and callable(value) and not isinstance(value, type):
                monkeypatch.setattr(llama_cpp, name, self._wrap(value, f"llama_cpp.{name}"))
        for cls in ENGINE_CLASSES:
            for name, value in list(vars(cls).items()):
                label = f"{cls.__name__}.{name}"
                if name.startswith("__") or isinstance(value, type):
                    continue
                if isinstance(value, property) and value.fget is not None:
                    monkeypatch.setattr(cls, name, property(self._wrap(value.fget, label), value.fset))
                elif isinstance(value, (staticmethod, classmethod)):
                    monkeypatch.setattr(cls, name, type(value)(self._wrap(value.__func__, label)))
                elif callable(value):
                    monkeypatch.setattr(cls, name, self._wrap(value, label))
        return self

    def _wrap(self, function: Callable[..., Any], label: str) -> Callable[..., Any]:
        @functools.wraps(function)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == self.ui_thread:
                stack = "".join(traceback.format_stack(limit=8)[:-1])
                self.violations.append(f"{label} on the UI thread, from:\n{stack}")
            else:
                self.calls_off_ui += 1
            return function(*args, **kwargs)

        return guarded

    def report(self) -> str:
        """The distinct offenders, each with the frames of its first call."""
        first: dict[str, str] = {}
        for violation in self.violations:
            first.setdefault(violation.split(" ", 1)[0], violation)
        return "\n".join(first.values())

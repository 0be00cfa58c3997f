"""The loaded generator, its chat format, and the lock every thread that uses them holds.

llama.cpp contexts are not thread-safe: a load, a calibration and a reply each hold `lock` for as
long as they touch the generator, so a reply started while a new pair loads simply waits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from spectui.chat.template import ChatFormat, ChatMessage
from spectui.session.reply import ReplyEvent, ReplyRequest, never, run_reply

if TYPE_CHECKING:
    from spectui.engine.generator import Generator


class EngineSession:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generator: Generator | None = None
        self.chat_format: ChatFormat | None = None

    def install(self, generator: Generator, mode: str = "auto") -> ChatFormat:
        """Take over a freshly loaded generator (call with `lock` held); `mode` as `--mode`.
        Returns the chat format it now renders prompts with."""
        self.release()
        self.generator = generator
        self.chat_format = chat_format = ChatFormat.from_model(generator.target, mode)
        return chat_format

    def release(self) -> None:
        """Free the loaded models (call with `lock` held)."""
        if self.generator is not None:
            self.generator.close()
        self.generator = None
        self.chat_format = None

    def reply(self, request: ReplyRequest, cancelled: Callable[[], bool] = never) -> Iterator[ReplyEvent]:
        """One reply through the reply core, holding `lock` until it ends (blocking: a worker
        thread). `SpectuiError` when no model is loaded."""
        from spectui.errors import SpectuiError

        with self.lock:
            if self.generator is None or self.chat_format is None:
                raise SpectuiError("no model is loaded: pick a pair, or restart with --target/--draft")
            yield from run_reply(self.generator, self.chat_format, request, cancelled)

    def prompt_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        """The whole conversation, rendered and tokenized (the KV cache makes re-sending cheap)."""
        if self.generator is None or self.chat_format is None:
            raise RuntimeError("no model loaded")
        return self.chat_format.prompt_tokens(self.generator.target, messages)

    def close(self, timeout: float = 5.0) -> bool:
        """Free the models once no thread uses them; False if one still holds the lock."""
        if not self.lock.acquire(timeout=timeout):
            return False
        try:
            self.release()
        finally:
            self.lock.release()
        return True

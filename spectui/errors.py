"""User-facing errors: each carries one line that says what went wrong and what to do.

The CLI prints `str(error)` and exits non-zero; the UI shows it in a notification. Anything that
is not a `SpectuiError` is a bug: the last-resort handler (`spectui.crashlog`) prints one line and
keeps the traceback in a log file.
"""

from __future__ import annotations


class SpectuiError(Exception):
    """An error the user can act on; its message is one line ending in what to do.

    `str()` gives that line terminal-safe (`spectui.safe_text.line`): a message quoting a name or
    a path from outside stays one line, its control characters shown escaped, wherever it is shown.
    """

    def __str__(self) -> str:
        from spectui.safe_text import line

        return line(super().__str__())


class ModelLoadError(SpectuiError):
    """A GGUF file is missing, unreadable, truncated, or not a model llama.cpp can load."""


class LoadCancelled(SpectuiError):
    """A model load was stopped by its progress callback (the user quit or switched pairs)."""


class IncompatibleDraftError(SpectuiError):
    """The draft cannot propose tokens for this target (different vocabulary or special tokens)."""


class UnsupportedModelError(SpectuiError):
    """The model cannot be used for speculation (e.g. its KV cache cannot be partially rolled back)."""


class RollbackError(SpectuiError):
    """llama.cpp refused to rewind a context it should be able to rewind (the context is cleared)."""


class ContextFullError(SpectuiError):
    """The context window has no room left for the prompt or the reply."""

    @classmethod
    def of(cls, n_ctx: int) -> ContextFullError:
        return cls(f"the context is full ({n_ctx} tokens); start a new chat or raise --ctx")


class CatalogError(SpectuiError):
    """models.toml is malformed or names an unknown pair."""


class PullError(SpectuiError):
    """Downloading a pair failed (gated repo, missing file, no disk space, network)."""


class SettingsError(SpectuiError):
    """spectui's `config.toml` is malformed."""


class LocalModelError(SpectuiError):
    """A reference to a model on disk (`ollama:`, `lmstudio:`, `hf:`) cannot be resolved."""


class RpcError(SpectuiError):
    """llama.cpp's RPC backend is missing, or a worker is unreachable, refuses or speaks another protocol."""


class WorkerLostError(RpcError):
    """A worker stopped answering while it held part of the target; the model must be loaded again.

    `what` says which worker and how it was lost; `spectui.faults` adds what to do where it is
    shown (a command, the chat app)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}: start the worker again, then load the pair again")
        self.what = what


class ModelFileError(ModelLoadError):
    """A loaded model's file was truncated or rewritten on disk: the weights llama.cpp reads from
    it (memory-mapped) are no longer the ones loaded, so nothing more may be generated with it."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what}: put the file back, then load the pair again")
        self.what = what


class CannotMeasure(SpectuiError):
    """`spectui bench` was asked for something it cannot measure with these models or options
    (a drafter they cannot run, a prompt longer than the context, speculation off against off)."""


class StorageError(SpectuiError):
    """A directory spectui must write to cannot be written (read-only, full, a file in the way)."""


class Interrupted(SpectuiError):
    """The user or the system asked the command to stop (Ctrl+C, SIGTERM, a closed terminal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}")
        self.signum = signum

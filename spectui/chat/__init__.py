"""Chat templates (sandboxed Jinja from the GGUF metadata) and the SQLite conversation store."""

from spectui.chat.store import ChatStore, ChatSummary, StoredMessage
from spectui.chat.template import ChatFormat, ChatMessage, ChatTemplateError, encode_prompt

__all__ = [
    "ChatFormat",
    "ChatMessage",
    "ChatStore",
    "ChatSummary",
    "ChatTemplateError",
    "StoredMessage",
    "encode_prompt",
]

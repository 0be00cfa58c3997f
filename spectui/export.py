"""A saved chat as Markdown or JSON: `spectui export` and the app's export key (F10).

Markdown is for reading: the turns in order, each reply's reasoning in a folded `<details>`
block, and under each reply its figures (tokens, acceptance, tokens per pass, K, speed) from the
stats saved with it. JSON is everything stored: the chat's row (title, pair, settings, mode,
models) and every message with its stats and reasoning.

The command reads the store without writing to it (read-only, through the salvage reader, so a
store from an older version still exports as it is). A damaged store is never taken for an
empty one: what can still be read is listed or exported, and one line on stderr says the store
is damaged, what was read from it, and that `spectui export --repair` does what the app does when
it opens such a store (keeps what can be read in a fresh one, then moves the old one aside; a full
disk leaves it as it was); the exit code is 1 all the same, since what was read may not be all
there was. Files written with `-o` are written whole beside FILE first (`spectui.user_files`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from spectui import safe_text
from spectui.chat.chat_settings import ChatSettings
from spectui.chat.salvage import Salvaged
from spectui.chat.store import ChatInfo, ChatStore, StoredMessage
from spectui.errors import SpectuiError
from spectui.faults import EXIT_FAULT, StoreDamaged
from spectui.session.figures import ReplyFigures, meta_line, plural

Format = Literal["md", "json"]
FORMATS: tuple[Format, ...] = ("md", "json")
JSON_FORMAT = "spectui-chat"
JSON_VERSION = 1


class ExportError(SpectuiError):
    """No such chat, nothing saved, or the file cannot be written."""


@dataclass(frozen=True)
class ChatExport:
    info: ChatInfo
    messages: list[StoredMessage]


def read_chat(store: Any, chat_id: int) -> ChatExport:
    """The chat's row and messages from `store` (a `ChatStore` or the app's `SafeStore`)."""
    info = store.chat_info(chat_id)
    if info is None:
        raise ExportError(f"no saved chat has id {chat_id}: `spectui export` lists them")
    return ChatExport(info, store.messages(chat_id))


def to_markdown(chat: ChatExport) -> str:
    info = chat.info
    lines = [f"# {info.title or 'Untitled chat'}", ""]
    lines += [f"- {fact}" for fact in _facts(info)]
    for message in chat.messages:
        lines += ["", *_message_markdown(message)]
    return "\n".join(lines).rstrip() + "\n"


def _facts(info: ChatInfo) -> list[str]:
    from spectui.catalog.local.origin import display_name  # an Ollama blob by its Ollama name

    facts = [f"chat {info.id}, started {_when(info.created_at)}, last changed {_when(info.updated_at)}"]
    models = info.models
    if info.pair or models:
        files = " + ".join(display_name(Path(str(p))) for p in (models.get("target"), models.get("draft")) if p)
        facts.append(f"pair {info.pair or '?'}" + (f" ({files})" if files else ""))
    if info.mode:
        facts.append(f"mode: {info.mode}")
    if info.settings:
        facts.append(f"settings: {ChatSettings.from_stored(info.settings).describe()}")
    return facts


def _when(stamp: str) -> str:
    return stamp[:16].replace("T", " ")


def _message_markdown(message: StoredMessage) -> list[str]:
    if message.role == "system":
        return ["## System prompt", "", message.content]
    if message.role == "user":
        return ["## You", "", message.content]
    lines = ["## Assistant", ""]
    figures = ReplyFigures.from_stored(message.stats)
    if message.reasoning:
        tokens = figures.thinking_tokens if figures is not None else 0
        counted = f" ({plural(tokens, 'token')})" if tokens else ""
        lines += [f"<details><summary>Thinking{counted}</summary>", "", message.reasoning, "", "</details>", ""]
    lines.append(message.content.strip("\n"))
    line = meta_line(figures) if message.complete else "interrupted (saved before it finished)"
    if line:
        lines += ["", f"*{line}*"]
    return lines


def to_json(chat: ChatExport) -> str:
    document = {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "chat": asdict(chat.info),
        "messages": [asdict(message) for message in chat.messages],
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def render(chat: ChatExport, fmt: Format) -> str:
    return to_json(chat) if fmt == "json" else to_markdown(chat)


def write(text: str, path: Path, *, force: bool = False) -> Path:
    """Write `text` to `path`, a new file unless `force` (`-o FILE --force`); one line when that
    is impossible or `path` exists. Either way the file is written whole beside `path` first, so
    a full disk leaves an existing FILE as it was (`spectui.user_files`)."""
    from spectui.user_files import create_new, replace_file

    try:
        if force:
            replace_file(path, text)
        else:
            create_new(path, text)
    except FileExistsError:
        raise ExportError(f"{path} already exists; add --force to overwrite it, or choose another file with -o") \
            from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise ExportError(f"cannot write the export to {path} ({reason}): choose another file with -o") from None
    return path.resolve()


def default_path(chat_id: int, fmt: Format, directory: Path | None = None) -> Path:
    """`spectui-chat-7.md` in `directory` (default: the current one)."""
    return (directory or Path.cwd()) / f"spectui-chat-{chat_id}.{fmt}"


def write_unused(text: str, chat_id: int, fmt: Format, directory: Path | None = None) -> Path:
    """Write to `default_path`, or to the first free name after it (`spectui-chat-7-2.md`): the
    app's export key never overwrites a file (chat ids restart with each store)."""
    from spectui.user_files import write_unused_name

    folder = directory or Path.cwd()
    try:
        return write_unused_name(folder, f"spectui-chat-{chat_id}", f".{fmt}", text).resolve()
    except OSError as error:
        reason = error.strerror or str(error)
        raise ExportError(f"cannot write the export to {folder} ({reason})") from None


# ----- `spectui export` -------------------------------------------------------------------------


def export_command(args: argparse.Namespace) -> int:
    if getattr(args, "repair", False):
        if args.chat_id is not None or args.last or args.output or args.format:
            raise ExportError("--repair takes no chat id, --last, --format or -o: run it alone, then export")
        return repair_command()
    if args.chat_id is not None and args.last:
        raise ExportError("give a chat id or --last, not both")
    saved = open_saved_chats()
    store = saved.store
    try:
        if args.chat_id is None and not args.last:
            list_chats(store)
            return saved.exit_code()
        chat_id = args.chat_id if args.chat_id is not None else store.last_chat_id()
        if chat_id is None:
            raise ExportError(f"no saved chats yet in {saved_chats_path()}")
        chat = read_chat(store, chat_id)
    finally:
        store.close()
    fmt = args.format or _format_of(args.output)
    text = render(chat, fmt)
    if args.output is None:
        sys.stdout.write(safe_text.block(text) if sys.stdout.isatty() else text)  # a pipe gets it exact
    else:
        written = write(text, Path(args.output).expanduser(), force=args.force)
        print(f"spectui: chat {chat.info.id} exported to {safe_text.line(written)}", file=sys.stderr)
    return saved.exit_code()


def _format_of(output: str | None) -> Format:
    return "json" if output is not None and output.lower().endswith(".json") else "md"


def saved_chats_path() -> Path:
    from spectui.paths import chats_db_path

    return chats_db_path()


@dataclass
class SavedChats:
    """The readable chats of the store, copied into memory, and whether the store is damaged."""

    store: ChatStore
    path: Path
    found: Salvaged
    damage: str | None = None
    """Why the app would move the store aside (None: it is sound)."""

    def damage_line(self, shown: str) -> str:
        """One line: the store is damaged, what of it could be read (`shown`: where it went)."""
        readable = (f"{plural(self.found.chats, 'chat')} ({plural(self.found.messages, 'message')}) can still be "
                    f"read from it{shown}" if self.found.messages else "no chat can be read from it")
        return (f"the chat store {self.path} is damaged ({self.damage}); {readable}; `spectui export --repair` "
                "moves it aside and keeps what can be read in a fresh store, as the app does when it opens")

    def exit_code(self) -> int:
        """1 after anything read from a damaged store, which says so on stderr (it may not be all)."""
        if self.damage is None:
            return 0
        print(f"spectui: {self.damage_line(' (what is shown above)')}", file=sys.stderr)
        return EXIT_FAULT


def open_saved_chats() -> SavedChats:
    """Every readable chat, copied into memory from the store file without writing to it; a
    store with nothing readable that is damaged raises `StoreDamaged` (never "no chats yet")."""
    from spectui.chat.salvage import damage, salvage

    path = saved_chats_path()
    if not path.is_file():
        raise ExportError(f"no saved chats yet ({path} does not exist)")
    store = ChatStore(None)
    saved = SavedChats(store, path, salvage(path, store), damage(path))
    if saved.damage is not None and not saved.found.messages:
        store.close()
        raise StoreDamaged(saved.damage_line(""))
    return saved


def list_chats(store: ChatStore) -> None:
    chats = store.list_chats(limit=1_000_000)
    if not chats:
        raise ExportError(f"no saved chats yet in {saved_chats_path()}")
    for chat in chats:
        title = safe_text.line(" ".join(chat.title.split())) or "(empty chat)"
        print(f"{chat.id:>5}  {_when(chat.updated_at)}  {plural(chat.n_messages, 'message'):>12}  {title}")
    print("export one: spectui export ID [--format md|json] [-o FILE], or --last", file=sys.stderr)


def repair_command() -> int:
    """What the app does to a damaged store when it opens (`SafeStore`): keep what can be read in
    a fresh store, and move the damaged one aside once the fresh one is whole
    (`spectui.chat.repair`). A sound store is left alone; one that cannot be repaired (a full
    disk) too, with one line and exit code 1."""
    from spectui.chat.repair import RepairFailed, repair
    from spectui.chat.salvage import damage

    path = saved_chats_path()
    if not path.is_file():
        print(f"spectui: there is no chat store at {path}: nothing to repair", file=sys.stderr)
        return 0
    reason = damage(path)
    if reason is None:
        print(f"spectui: the chat store {path} is sound: nothing to repair", file=sys.stderr)
        return 0
    try:
        repaired = repair(path)
    except RepairFailed as failure:
        raise StoreDamaged(f"the chat store {path} is damaged ({reason}) and was left as it is: a repaired copy "
                           f"cannot be written beside it ({failure}); make room and run `spectui export --repair` "
                           "again (`spectui export` still reads it)") from None
    into = f" into a fresh {path.name}" if repaired.found.messages else ""
    print(f"spectui: the chat store was damaged ({reason}): it was moved to {repaired.aside}; "
          f"{repaired.found.describe()}{into}", file=sys.stderr)
    return 0

"""Quitting without losing the reply, the signals that quit, and loading the pair again after a
fault: `Lifecycle`, held by `SpectuiApp` (`app.lifecycle`), whose quit keys, bus-error hook and
`reload_first` hand over to it.

- Ctrl+Q, Ctrl+C (when no text is selected: then it copies), SIGTERM, SIGHUP (the terminal was
  closed) and SIGINT all quit the same way. A reply in progress is stopped at its next cycle and
  saved whole (every token generated, shown or not yet), marked interrupted: reopened with
  `--resume` or Ctrl+O it says "interrupted (saved before it finished)". What is on screen is
  saved at once too, in case the process ends before the reply does. A reply that does not end
  within `QUIT_WAIT` seconds (a worker that stopped answering) is left as saved, and the app
  exits; after a signal, a watchdog ends the process if the exit itself hangs (a terminal that
  is gone). The exit code is 128 + the signal's number.
- SIGBUS (`spectui.signals`): a model file truncated while llama.cpp reads it. The reply thread
  can never return, so what is on screen is saved, the terminal is given back, and one line
  naming the file ends the process with exit code 1.
- A fault that leaves the loaded models unusable (a worker lost, a model file changed) or a
  load that failed for want of a worker: the next message loads the pair again first, and is
  sent once it is loaded (a load that fails again gives the text back to the message box). A
  worker whose connection closed while the app sat idle is noticed when a message is sent,
  before the reply starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from typing import Any, cast

from textual.worker import WorkerCancelled

from spectui import faults
from spectui.ui.core import AppCore

QUIT_WAIT = 3.0
"""Seconds a quit waits for the reply in progress to stop and hand over its last tokens."""
WATCHDOG = 10.0
"""Seconds after a quitting signal before the process ends, whatever the app is doing."""
SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Lifecycle:
    """Quitting, signals, loading again after a fault (see the module's docstring). Writes
    `app.quit_state`; asks the engine host (`app.engine`) to check, mark and load the pair."""

    def __init__(self, app: AppCore) -> None:
        self.app = app

    # ----- quitting ----------------------------------------------------------------------------

    def copy_or_quit(self) -> None:
        """Ctrl+C: copy the selected text if there is some (the message box, or the chat),
        else quit as Ctrl+Q does."""
        app = self.app
        focused = app.focused
        if focused is not None and getattr(focused, "selected_text", None):
            cast(Any, focused).action_copy()  # a text area, or the chat log
            return
        with contextlib.suppress(Exception):
            if selected := app.screen.get_selected_text():
                app.copy_to_clipboard(selected)
                return
        self.request_quit()

    def request_quit(self, code: int = 0, line: str | None = None) -> None:
        """Quit once the reply in progress (if any) has stopped and been saved; a second request
        quits at once."""
        state = self.app.quit_state
        if line is not None:
            state.quit_line = line
        if state.quitting is not None or self.app.replies.busy is None:
            state.quitting = code if state.quitting is None else state.quitting
            self._quit_now()
            return
        state.quitting = code
        self.app.chat_pane.stop_reply("stopping the reply, saving it, quitting…")
        self.save_streamed()
        self.app.set_timer(QUIT_WAIT, self._quit_now)

    def _quit_now(self) -> None:
        self.save_streamed()
        self.app.exit(return_code=self.app.quit_state.quitting or 0)

    def save_streamed(self) -> bool:
        """Save the reply in progress, marked interrupted: every piece its thread has streamed
        (on screen or on its way), else what is on screen. Nothing when no reply is in progress."""
        widget, conversation = self.app.replies.reply_widget, self.app.chat.conversation
        if self.app.replies.busy != "reply" or widget is None or not widget.streaming or not conversation.replying:
            return False
        text, reasoning = widget.text, widget.reasoning
        batcher = self.app.replies.batcher
        if batcher is not None and batcher.purpose == "reply":
            streamed, thought = batcher.split()
            if len(streamed) + len(thought) >= len(text) + len(reasoning):
                text, reasoning = streamed, thought
        return conversation.save_interrupted(text, reasoning, {"reason": "interrupted"})

    # ----- signals -----------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM, SIGHUP and SIGINT quit as Ctrl+Q does (only where the loop can take them: the
        main thread)."""
        loop = asyncio.get_running_loop()
        for signum in SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self.on_quit_signal, signum)

    def remove_signal_handlers(self) -> None:
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            for signum in SIGNALS:
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(signum)

    def on_quit_signal(self, signum: int) -> None:
        fault = faults.interrupted(signum)
        saved = self.app.replies.busy == "reply" and self.app.replies.reply_widget is not None
        line = f"{fault.line}; the reply in progress was saved (spectui chat --resume reopens it)" if saved \
            else fault.line
        if signum == signal.SIGHUP:
            self.hang_up(line, fault.exit_code)
            return
        if self.app.quit_state.watchdog is None:
            self.app.quit_state.watchdog = _watchdog(line, fault.exit_code)
        self.request_quit(fault.exit_code, line)

    def hang_up(self, line: str, code: int) -> None:
        """The terminal is gone: nothing can be drawn (Textual's output thread dies on the first
        write, and the app would block on the next), so the reply is stopped and saved from
        what its thread streamed, here, and the process ends. It is a quit: a reply message the
        chat pane still handles before the end saves the reply as interrupted, not finished."""
        self.app.quit_state.quit_line, self.app.quit_state.quitting = line, code
        self.app.chat_pane.stop_reply(status=None)  # nothing drawn: the terminal is gone
        batcher = self.app.replies.batcher
        if batcher is not None and self.app.replies.busy == "reply":
            batcher.done.wait(QUIT_WAIT)  # its last tokens, at its next cycle
        self.save_streamed()
        from spectui.signals import exit_now

        exit_now(line, code)

    def cancel_watchdog(self) -> None:
        """The app closed in time (called last when it unmounts)."""
        if self.app.quit_state.watchdog is not None:
            self.app.quit_state.watchdog.cancel()
            self.app.quit_state.watchdog = None

    def on_bus_error(self) -> faults.Fault:
        """A SIGBUS (see the module's docstring): save, give the terminal back, say which file."""
        with contextlib.suppress(Exception):
            self.save_streamed()
        with contextlib.suppress(Exception):
            if self.app._driver is not None:
                self.app._driver.stop_application_mode()
        return faults.bus_fault("command")

    # ----- loading again after a fault --------------------------------------------------------

    async def reload_first(self, text: str) -> bool:
        """Before sending `text`: when the models must be loaded again (a fault said so, or a
        worker was lost since the last reply), queue it and load them; True when it was queued."""
        app = self.app
        pair, engine, idle = app.pair, app.engine, app.replies.busy is None
        if not pair.reload_pending and pair.ready and idle and pair.session.generator is not None:
            try:
                health = await engine.check_loaded().wait()
            except WorkerCancelled:
                return True  # the app is ending: nothing is sent
            if health.fault is not None:
                fault = faults.of_error(health.fault, "app")
                engine.set_reload_pending(fault.reload)
                await app.note(fault.line, "warning")
            for name in engine.newly_removed(health.removed):
                await app.note(f"{name} was removed from disk after it was loaded: this chat goes on with the "
                               "loaded copy, but loading the pair again will not find it", "warning")
        if not pair.reload_pending or app.replies.busy is not None or (not pair.ready and not pair.load_failed):
            return False
        engine.set_reload_pending(False)
        await app.chat_pane.queue(text)
        await app.note(f"loading {app.pair.options.models_label} again; your message is sent once it is loaded")
        engine.start_loading(app.pair.options)
        return True


def _watchdog(line: str, code: int) -> threading.Timer:
    """End the process `WATCHDOG` seconds from now unless cancelled (a daemon thread)."""
    from spectui.signals import exit_now

    timer = threading.Timer(WATCHDOG, exit_now, args=(f"{line} (the app did not close in time)", code))
    timer.daemon = True
    timer.start()
    return timer

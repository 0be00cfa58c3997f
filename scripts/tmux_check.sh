#!/usr/bin/env bash
# Drive the real terminal app under tmux, as a person would, and check what the screen shows.
#
#   scripts/tmux_check.sh            (PYTHON=/path/to/python to pick the interpreter)
#
# Generates the tiny test models, starts `spectui chat --target … --draft …` in a detached
# 120x40 tmux session, types a message, and reads the screen back with capture-pane: the reply
# and its summary line, the panel's acceptance / K / baseline, the speculation toggle, Escape,
# and a clean exit on ctrl+q with the chat saved. Then a base model's first screen, and the
# everyday chat on a reasoning model (scripted weights): a message queued while it loads, the
# thinking block folded, Ctrl+J and a bracketed 200-line paste, thinking off (ctrl+t), edit (up),
# regenerate (ctrl+r), copy (F9), export (F10), the settings screen (ctrl+s), `--resume` with the
# recorded models and settings, and `spectui export --last`. Exits non-zero, printing the screen,
# on failure.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
if [[ $PYTHON == */* ]]; then  # absolute (a venv's link kept as is): the reasoning chat runs elsewhere
    PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"
fi
SESSION="spectui-check-$$"
WORK=$(mktemp -d)
export SPECTUI_HOME="$WORK/home"

if ! command -v tmux >/dev/null; then
    echo "tmux is missing: installing it"
    apt-get update -qq && apt-get install -y -qq tmux
fi

cleanup() {
    tmux kill-session -t "$SESSION" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

screen() {
    tmux capture-pane -p -t "$SESSION"
}

fail() {
    echo "FAIL: $*" >&2
    echo "----- screen -----" >&2
    screen >&2 || true
    exit 1
}

# wait_for TEXT SECONDS [PAUSE]: poll the screen (every PAUSE seconds, 0.3) until TEXT appears.
wait_for() {
    local text=$1 deadline=$((SECONDS + $2))
    until screen | grep -qF -- "$text"; do
        ((SECONDS < deadline)) || fail "'$text' did not appear within $2 s"
        sleep "${3:-0.3}"
    done
}

expect() {
    screen | grep -qF -- "$1" || fail "expected '$1' on the screen"
}

cd "$ROOT"
"$PYTHON" - "$WORK/models" <<'EOF'
import sys
from pathlib import Path

sys.path.insert(0, "tests")
import tiny_gguf

tiny_gguf.write_pair(Path(sys.argv[1]))
tiny_gguf.write_pair(Path(sys.argv[1]) / "base", spec=tiny_gguf.TinySpec(chat_template=None))
import scripted_gguf

scripted_gguf.write_scripted_pair(Path(sys.argv[1]) / "thinking")
EOF

tmux new-session -d -s "$SESSION" -x 120 -y 40 -e "SPECTUI_HOME=$SPECTUI_HOME" \
    "cd '$ROOT' && '$PYTHON' -m spectui chat --target '$WORK/models/target.gguf' \
     --draft '$WORK/models/draft.gguf' -k 4 --max-tokens 48 --ctx 1024 --threads 2; \
     echo SPECTUI-EXIT=\$?; sleep 600"

wait_for "ready ·" 90
expect "baseline: "
expect "calibration after load"
expect "K (draft length) 4"

tmux send-keys -t "$SESSION" "Tell me about bicycle gears" Enter
wait_for "accepted ·" 90          # the reply's summary line: "N tokens · NN% accepted · …"
expect "Tell me about bicycle gears"
expect "assistant"
screen | grep -E "acceptance +[0-9]+%" >/dev/null || fail "the panel shows no acceptance"
screen | grep -E "speedup +[0-9.]+x" >/dev/null || fail "the panel shows no speedup"

tmux send-keys -t "$SESSION" F4
wait_for "off (K=4 when on)" 10
tmux send-keys -t "$SESSION" F4
wait_for "K (draft length) 4" 10

tmux send-keys -t "$SESSION" F3
wait_for "K (draft length) 5" 10

tmux send-keys -t "$SESSION" Escape C-q
wait_for "SPECTUI-EXIT=0" 30

"$PYTHON" - <<'EOF' || fail "the chat was not saved"
from spectui.chat.store import ChatStore
from spectui.paths import chats_db_path

store = ChatStore(chats_db_path())
messages = store.messages(store.last_chat_id())
assert [m.role for m in messages] == ["user", "assistant"], messages
assert messages[1].complete and messages[1].content
EOF

# The first-run screen of a base model (no chat template), as a new user sees it: completion mode
# in the header, the one-line hint, and an example opening picked from the keyboard.
tmux kill-session -t "$SESSION"
tmux new-session -d -s "$SESSION" -x 120 -y 40 -e "SPECTUI_HOME=$SPECTUI_HOME" \
    "cd '$ROOT' && '$PYTHON' -m spectui chat --target '$WORK/models/base/target.gguf' \
     --draft '$WORK/models/base/draft.gguf' --max-tokens 32 --ctx 1024 --threads 1; \
     echo SPECTUI-EXIT=\$?; sleep 600"
wait_for "ready ·" 90
expect "completion ·"
expect "base model: it continues your text"
expect "warm start:"
tmux send-keys -t "$SESSION" F8
sleep 0.5
tmux send-keys -t "$SESSION" Enter
wait_for "continuation" 30
expect "The lighthouse keeper found the bottle"
wait_for "tokens ·" 60
tmux send-keys -t "$SESSION" C-q
wait_for "SPECTUI-EXIT=0" 30

# The everyday chat on a reasoning model, run from a scratch directory (F10 exports there).
tmux kill-session -t "$SESSION"
THINK="$WORK/models/thinking"
start_thinking() {
    tmux new-session -d -s "$SESSION" -x 120 -y 40 -e "SPECTUI_HOME=$SPECTUI_HOME" \
        "cd '$WORK' && PYTHONPATH='$ROOT' '$PYTHON' -m spectui chat $1 --max-tokens 24 --ctx 4096 --threads 1; \
         echo SPECTUI-EXIT=\$?; sleep 600"
}
start_thinking "--target '$THINK/target.gguf' --draft '$THINK/draft.gguf'"
wait_for "loading" 60 0.02                             # the load takes about a second here:
tmux send-keys -t "$SESSION" "How many gears?" Enter    # typed while the models load
wait_for "queued" 10 0.02
wait_for "thought for 6 tokens" 90                     # sent once ready; the thinking folded
expect "Four gears!"
expect "10 tokens (6 thinking)"
expect "thinking on"

tmux send-keys -t "$SESSION" "first line" C-j "second line" Enter
wait_for "second line" 10
sleep 2
seq -f "pasted line %g" 1 200 > "$WORK/paste.txt"
tmux load-buffer -b spectui-paste "$WORK/paste.txt"
tmux paste-buffer -p -b spectui-paste -t "$SESSION"     # bracketed, as a terminal pastes
sleep 1
tmux send-keys -t "$SESSION" Enter
wait_for "pasted line 200" 30
sleep 2

tmux send-keys -t "$SESSION" C-t
wait_for "thinking off" 10
tmux send-keys -t "$SESSION" Up
wait_for "editing your last message" 10
tmux send-keys -t "$SESSION" C-End " (edited)" Enter
wait_for "pasted line 200 (edited)" 30
sleep 2
tmux send-keys -t "$SESSION" C-r
sleep 2
tmux send-keys -t "$SESSION" F9
wait_for "reply copied to the clipboard" 10
tmux send-keys -t "$SESSION" F10
wait_for "chat exported to" 10
compgen -G "$WORK/spectui-chat-*.md" >/dev/null || fail "F10 wrote no spectui-chat-N.md in $WORK"
tmux send-keys -t "$SESSION" C-s
wait_for "Chat settings" 10
sleep 0.5
tmux send-keys -t "$SESSION" BSpace                       # temperature (its field has the focus); a
sleep 0.3                                                 # backspace sent in one burst with text lands late
tmux send-keys -t "$SESSION" "0.7" Enter
wait_for "T=0.7 top-p 0.95" 10
tmux send-keys -t "$SESSION" C-q
wait_for "SPECTUI-EXIT=0" 30

"$PYTHON" - <<'EOF' || fail "the reasoning chat was not saved as expected"
from spectui.chat.store import ChatStore
from spectui.paths import chats_db_path

store = ChatStore(chats_db_path())
chat = store.last_chat_id()
messages = store.messages(chat)
users = [m.content for m in messages if m.role == "user"]
assert users[:2] == ["How many gears?", "first line\nsecond line"], users
lines = users[2].splitlines()
assert len(lines) == 200 and lines[-1] == "pasted line 200 (edited)", lines[-3:]
replies = [m for m in messages if m.role == "assistant"]
assert len(replies) == 3 and all(r.reasoning == "Let me count." for r in replies[:2]), replies
info = store.chat_info(chat)
assert info.settings["temperature"] == 0.7 and not info.settings["thinking"] and info.mode == "chat", info
EOF

# --resume without naming models: the chat comes back with the models and settings it was saved with.
tmux kill-session -t "$SESSION"
start_thinking "--resume"
wait_for "ready ·" 90
expect "resumed with the models this chat was recorded with"
expect "T=0.7 top-p 0.95"
expect "thinking off"
tmux send-keys -t "$SESSION" C-q
wait_for "SPECTUI-EXIT=0" 30
"$PYTHON" -m spectui export --last > "$WORK/export.md" || fail "spectui export --last failed"
grep -qF "<details><summary>Thinking (6 tokens)</summary>" "$WORK/export.md" || fail "the export has no thinking block"
grep -qF "## You" "$WORK/export.md" || fail "the export has no turns"

echo "tmux check passed: reply streamed, panel showed acceptance/baseline/speedup, keys worked, chat saved;"
echo "a base model opened in completion mode and an example opening was picked with F8 + Enter;"
echo "a reasoning chat: queued while loading, thinking folded, multi-line and pasted messages, thinking off,"
echo "edit, regenerate, copy, export, settings, --resume with the recorded models, spectui export --last"

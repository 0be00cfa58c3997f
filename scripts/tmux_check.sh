#!/usr/bin/env bash
# Drive the real terminal app under tmux, as a person would, and check what the screen shows.
#
#   scripts/tmux_check.sh            (PYTHON=/path/to/python to pick the interpreter)
#
# Generates the tiny test models, starts `spectui chat --target … --draft …` in a detached
# 120x40 tmux session, types a message, and reads the screen back with capture-pane: the reply
# and its summary line, the panel's acceptance / K / baseline, the speculation toggle, Escape,
# and a clean exit on ctrl+q with the chat saved. Exits non-zero, printing the screen, on failure.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
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

# wait_for TEXT SECONDS: poll the screen until TEXT appears.
wait_for() {
    local text=$1 deadline=$((SECONDS + $2))
    until screen | grep -qF -- "$text"; do
        ((SECONDS < deadline)) || fail "'$text' did not appear within $2 s"
        sleep 0.3
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
EOF

tmux new-session -d -s "$SESSION" -x 120 -y 40 \
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
tmux new-session -d -s "$SESSION" -x 120 -y 40 \
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

echo "tmux check passed: reply streamed, panel showed acceptance/baseline/speedup, keys worked, chat saved;"
echo "a base model opened in completion mode and an example opening was picked with F8 + Enter"

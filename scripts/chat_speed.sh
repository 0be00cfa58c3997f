#!/usr/bin/env bash
# A chat's replies, one after another, in the real app under tmux (a fresh SPECTUI_HOME): each
# reply's speed as the panel shows it ("this reply … tok/s") and its speed-up line. What the app
# costs the model shows as speed lost reply by reply, against the model alone at those contexts
# (docs/BENCHMARKS.md, "The app's own cost").
#
#   scripts/chat_speed.sh TARGET DRAFT [K] [ROUNDS]     (K default 0; ROUNDS of three prompts, default 2)
#
# Environment: PYTHON (default .venv/bin/python), SRC (the checkout to run, default this one: an
# older worktree runs the same way), TEMP (default 0), THREADS (default 2), COLS x ROWS (default
# 120 x 40). Needs tmux. Run it on an otherwise quiet machine.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
SRC=${SRC:-$ROOT}
TARGET=${1:?usage: scripts/chat_speed.sh TARGET DRAFT [K] [ROUNDS]}
DRAFT=${2:?usage: scripts/chat_speed.sh TARGET DRAFT [K] [ROUNDS]}
K=${3:-0}
ROUNDS=${4:-2}
SESSION="spectui-chat-speed-$$"
HOME_DIR=$(mktemp -d)
trap 'tmux kill-session -t "$SESSION" 2>/dev/null || true; rm -rf "$HOME_DIR"' EXIT

# shellcheck source=scripts/tmux_screen.sh
source "$ROOT/scripts/tmux_screen.sh"

tmux new-session -d -s "$SESSION" -x "${COLS:-120}" -y "${ROWS:-40}" \
    "cd '$SRC' && SPECTUI_HOME='$HOME_DIR' '$PYTHON' -m spectui chat --target '$TARGET' --draft '$DRAFT' -k $K \
     --temperature ${TEMP:-0} --max-tokens 128 --threads ${THREADS:-2}; sleep 600"
wait_for "ready ·" 900
echo "after load: $(screen | grep -oE "baseline \(K=0\) +[0-9.]+ tok/s" | tr -s ' ')"
n=0
for _ in $(seq 1 "$ROUNDS"); do
    for question in "Write a short poem about the sea." "How do I sort a list of numbers in Python? Explain briefly." \
                    "List five facts about the moon."; do
        n=$((n + 1))
        tmux send-keys -t "$SESSION" -l "$question"
        tmux send-keys -t "$SESSION" Enter
        wait_for "generating…" 60
        wait_for "ready ·" 1200
        sleep 0.5
        tps=$(screen | grep -oE "this reply +[0-9]+\.[0-9]+ tok/s" | head -1 | grep -oE "[0-9]+\.[0-9]+" || echo "?")
        speedup=$(screen | grep -oE "speedup +[0-9.]+x" | head -1 | grep -oE "[0-9.]+x" || echo "?")
        echo "reply $n (K=$K): $tps tok/s, panel speed-up $speedup"
    done
done

#!/usr/bin/env bash
# The first minute, measured as a new user meets it: a bare `spectui` (the chat demo pair) in a
# real terminal under tmux, with a fresh home each time; once the app says it is ready, a question
# is typed as the first message and the reply's speed is read off the panel.
#
# Each round starts the app twice, interleaved: speculation on (as shipped) and off (`-k 0`), each
# in a fresh home; the round's speed-up is on / off. Prints every start, then the median and the
# spread of the rounds. Also the time from launching `spectui` to the first token of the reply, on a
# first start (the demo pair is built) and on a second start in the same home (it is reused).
#
#   scripts/first_reply.sh [ROUNDS]       (default 5)
#
# Environment: PYTHON (the interpreter, default .venv/bin/python), QUESTION (the first message),
# SPECTUI_ARGS (extra `spectui chat` options for both starts, e.g. "--temperature 0"), PAIR (a pair
# name, default: none, i.e. what a bare `spectui` opens), SHARE_MODELS=1 or a directory (every fresh
# home shares one models directory, a new one or that one: only the first start builds the demo
# pair, and its "ready" time is the build's; for `demo-wide`, whose 3.7 GB would otherwise be
# rebuilt at every start). Needs tmux and the demo extra (`pip install '.[demo]'`). Run it on an
# otherwise quiet machine.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
ROUNDS=${1:-5}
QUESTION=${QUESTION:-"How do I sort a list of numbers in Python? Explain briefly."}
SPECTUI_ARGS=${SPECTUI_ARGS:-}
PAIR=${PAIR:-}
SESSION="spectui-first-$$"
WORK=$(mktemp -d)
trap 'tmux kill-session -t "$SESSION" 2>/dev/null || true; rm -rf "$WORK"' EXIT

# shellcheck source=scripts/tmux_screen.sh
source "$ROOT/scripts/tmux_screen.sh"

now() { date +%s.%N; }

# start HOME EXTRA_ARGS: launch the app; print "ready_s first_token_s tok_s"
start() {
    local home=$1 extra=$2 t0 t_ready t_first tps
    if [[ -n "${SHARE_MODELS:-}" && ! -e "$home/models" ]]; then
        local models="$WORK/models"
        [[ -d "$SHARE_MODELS" ]] && models=$(cd "$SHARE_MODELS" && pwd)
        mkdir -p "$home" "$models"
        ln -s "$models" "$home/models"
    fi
    t0=$(now)
    tmux new-session -d -s "$SESSION" -x 120 -y 40 \
        "cd '$ROOT' && SPECTUI_HOME='$home' '$PYTHON' -m spectui chat $PAIR $SPECTUI_ARGS $extra; sleep 600"
    wait_for "ready ·" 900
    t_ready=$(now)
    tmux send-keys -t "$SESSION" -l "$QUESTION"
    tmux send-keys -t "$SESSION" Enter
    wait_for "╭─ assistant" 300
    # the first token is on screen once the reply box holds a line of text under its title
    until screen | grep -A1 "╭─ assistant" | tail -1 | grep -qE "│ +[^ │]"; do sleep 0.05; done
    t_first=$(now)
    wait_for "tokens ·" 1200
    sleep 0.5
    tps=$(screen | grep -oE "this reply +[0-9]+\.[0-9]+ tok/s" | head -1 | grep -oE "[0-9]+\.[0-9]+" || echo "")
    tmux send-keys -t "$SESSION" C-q
    sleep 1.5
    tmux kill-session -t "$SESSION" 2>/dev/null || true
    "$PYTHON" -c "print(f'{$t_ready - $t0:.2f} {$t_first - $t0:.2f} ${tps:-0}')"
}

ratios=()
for round in $(seq 1 "$ROUNDS"); do
    read -r on_ready on_first on_tps < <(start "$WORK/on-$round" "")
    read -r off_ready off_first off_tps < <(start "$WORK/off-$round" "-k 0")
    ratio=$("$PYTHON" -c "print(f'{$on_tps / $off_tps:.2f}' if $off_tps else '?')")
    printf 'round %d: on %s tok/s (ready %.1f s, first token %.1f s) · off %s tok/s (ready %.1f s) · %sx\n' \
        "$round" "$on_tps" "$on_ready" "$on_first" "$off_tps" "$off_ready" "$ratio"
    [[ "$ratio" != "?" ]] && ratios+=("$ratio")
done

read -r _ second_first _ < <(start "$WORK/on-1" "")
printf 'second start (home of round 1, demo pair reused): first token %.1f s after launch\n' "$second_first"

"$PYTHON" - "${ratios[@]}" <<'EOF'
import statistics
import sys

values = sorted(float(v) for v in sys.argv[1:])
if values:
    print(f"first reply, speculation on / off over {len(values)} interleaved rounds: median "
          f"{statistics.median(values):.2f}x, worst {values[0]:.2f}x, best {values[-1]:.2f}x")
EOF

#!/usr/bin/env bash
# The first five minutes, measured as a new user meets them: a bare `spectui` (the demo pair) in a
# real terminal under tmux, with a fresh home each time; once the app says it is ready, a story
# opening is typed as the first message and the panel's speed-up for that first reply is read off
# the screen. Prints each start's figures, then the median and the worst.
#
#   scripts/first_reply.sh [RUNS]          (PYTHON=/path/to/python picks the interpreter)
#
# Needs the demo extra (`pip install '.[demo]'`). Run it on an otherwise quiet machine.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
RUNS=${1:-5}
OPENING=${OPENING:-"The old lighthouse keeper climbed the stairs one last time. Outside, the storm"}
SESSION="spectui-first-$$"
WORK=$(mktemp -d)
trap 'tmux kill-session -t "$SESSION" 2>/dev/null || true; rm -rf "$WORK"' EXIT

screen() { tmux capture-pane -p -t "$SESSION"; }

wait_for() {  # wait_for TEXT SECONDS
    local deadline=$((SECONDS + $2))
    until screen | grep -qF -- "$1"; do
        if ((SECONDS >= deadline)); then
            echo "'$1' did not appear within $2 s" >&2
            screen >&2
            return 1
        fi
        sleep 0.3
    done
}

speedups=()
for run in $(seq 1 "$RUNS"); do
    export SPECTUI_HOME="$WORK/home-$run"
    start=$SECONDS
    tmux new-session -d -s "$SESSION" -x 120 -y 40 "cd '$ROOT' && '$PYTHON' -m spectui; sleep 600"
    wait_for "ready ·" 300
    ready_after=$((SECONDS - start))
    tmux send-keys -t "$SESSION" -l "$OPENING"
    tmux send-keys -t "$SESSION" Enter
    wait_for "tokens ·" 300
    sleep 0.5
    line=$(screen | grep -E "speedup +" | head -1)
    speedup=$(grep -oE "[0-9]+\.[0-9]+x" <<<"$line" | head -1 || true)
    accepted=$(screen | grep -oE "acceptance +[0-9]+%" | head -1 | grep -oE "[0-9]+%" || true)
    meta=$(screen | grep -oE "[0-9]+ tokens · [^│▊]*" | head -1 || true)
    echo "run $run: ready after ${ready_after}s; first reply: speedup ${speedup:-?}, acceptance ${accepted:-?}; ${meta}"
    [[ -n "$speedup" ]] && speedups+=("${speedup%x}")
    tmux send-keys -t "$SESSION" C-q
    sleep 2
    tmux kill-session -t "$SESSION" 2>/dev/null || true
done

"$PYTHON" - "${speedups[@]}" <<'EOF'
import statistics
import sys

values = sorted(float(v) for v in sys.argv[1:])
if values:
    print(f"first-reply speedup over {len(values)} fresh starts: median {statistics.median(values):.2f}x, "
          f"worst {values[0]:.2f}x, best {values[-1]:.2f}x")
EOF

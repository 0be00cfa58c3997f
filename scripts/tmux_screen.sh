# Sourced by the scripts that drive the real app under tmux (first_reply.sh, chat_speed.sh):
# reading the screen of tmux session $SESSION and waiting for text on it.

screen() { tmux capture-pane -p -t "$SESSION"; }

wait_for() {  # wait_for TEXT SECONDS: poll the screen every 0.1 s; on time out, say so, show it, fail
    local deadline=$((SECONDS + $2))
    until screen | grep -qF -- "$1"; do
        if ((SECONDS >= deadline)); then
            echo "'$1' did not appear within $2 s" >&2
            screen >&2
            return 1
        fi
        sleep 0.1
    done
}

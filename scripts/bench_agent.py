"""Agent-shaped replies through the HTTP API: `spectui serve` against llama-server (issue #38).

    .venv/bin/python scripts/bench_agent.py --target T.gguf --draft D.gguf --out agent.json   # 3 rounds
    .venv/bin/python scripts/bench_agent.py --tiny            # the tiny test pair, few tokens: checks the script
    .venv/bin/python scripts/bench_agent.py --target T.gguf --draft D.gguf --workload edit --temperature 0 \
        --llama-config none --llama-config "ngram-mod,draft-simple n8 p0.75"   # the issue's goal only

Two workloads, asked of every server in turn, streamed, on /v1/chat/completions:

- `edit`: a code edit. A file of ~150 lines of Python in the user's turn, one small change asked
  (rename a method and its call), the whole file asked back (scripts/agent_prompts.py): the reply
  repeats most of what it was given, where an agent's replies spend their time.
- `tool`: a tool-call loop. The question with `tools` (`tool_choice: required`, one call), the
  server's own call answered by a `role: tool` message (a pytest run's output), then the answer
  (`tool_choice: auto`). Its rows are `tool-call` and `tool-answer`; the loop's seconds are kept.
  A server that writes no whole call (llama-server on SmolLM2 answers `required` with plain text)
  is counted (`own calls`), and its answer follows the call the question asks for.

Servers, all on the same GGUF files, started afresh for each round and temperature (spectui's
suffix lookup and llama-server's n-gram pools learn from what they served) and asked in an order
that alternates: `spectui serve` with its defaults (drafter auto, K = auto) and with speculation off
(`--drafter none`: no draft loaded), each in its own throwaway SPECTUI_HOME; llama-server without a
draft and with scripts/bench_serve.py's speculative settings plus two longer drafts behind the
n-gram lookups. T 0 and T 0.8 (top-k 40, top-p 0.95, min-p 0.05, the same seed per round for
every server). tok/s is (tokens - 1) over the time from the first output to the last, as the client
sees it; each server's own `timings.predicted_per_second` is kept beside it. Medians over rounds.

Same prompt tokens: both chat routes render the target's template (spectui with its Jinja sandbox,
llama-server with its own engine, `--jinja` being its default). Before the rounds the script asks
llama-server's /apply-template for the edit's text and compares it with spectui's `ChatFormat`
rendering: the same, the edit goes through /v1/chat/completions; different, it goes to
/v1/completions with spectui's rendering, as bench_serve.py does (`--edit-route` forces either).
Each reply's `prompt_tokens` is kept and the table says when the servers' differ. The tool loop
needs the template's `tools`: a target whose template has no tool-call syntax (SmolLM2's ChatML)
is copied once into --work with Qwen 2.5's template (ChatML with Hermes `<tool_call>`s; for
messages without tools it renders the same text), by gguf's gguf_new_metadata, and both servers
load that copy. Nothing here is a test: it measures. Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from statistics import median

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from agent_prompts import (  # noqa: E402
    EXPECTED_CALL,
    FILE,
    TINY_TOOLS,
    TOOLS,
    answer_messages,
    edit_messages,
    tool_messages,
)
from bench_lookup import default_llama_bin  # noqa: E402
from bench_serve import (  # noqa: E402
    LLAMA_CONFIGS,
    SAMPLED,
    Reply,
    Setup,
    add_pair_arguments,
    llama_server,
    pair_files,
    rendered,
    running,
    spectui_server,
    write_results,
)
from bench_serve import stream as ask  # noqa: E402

CHAT = "/v1/chat/completions"
SPECTUI_CONFIGS = {"auto": [], "off": ["--drafter", "none"]}
"""`spectui serve`'s settings: its defaults, and speculation off (no draft loaded)."""
AGENT_LLAMA = {**LLAMA_CONFIGS,
               "ngram-simple,draft-simple n8 p0.75": ["--spec-type", "ngram-simple,draft-simple",
                                                      "--spec-draft-n-max", "8", "--spec-draft-p-min", "0.75"],
               "ngram-mod,draft-simple n8 p0.75": ["--spec-type", "ngram-mod,draft-simple", "--spec-draft-n-max", "8",
                                                   "--spec-draft-p-min", "0.75"]}
"""llama-server's settings: bench_serve.py's (`none` is its speculation off), and longer drafts
behind the n-gram lookups, which an edit's copied lines may feed."""
TOOL_TEMPLATE = ROOT / "tests" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
WORKLOADS = ("edit", "tool")
GOALS = {"vs_off": 3.0, "vs_llama": 1.5}
"""Issue #38: the edit reply at T 0, on the widened pair: >= 3x speculation off, >= 1.5x llama-server's best."""


def tool_ready(target: Path, work: Path) -> Path:
    """`target`, or where its template has no tool-call syntax a copy of it carrying Qwen 2.5's
    template (made once in `work`, named after the target's path, size and time)."""
    from spectui.chat.tool_calls import tool_syntax
    from spectui.engine.files.gguf_file import read_metadata

    if tool_syntax(str(read_metadata(target).get("tokenizer.chat_template") or "")) is not None:
        return target
    made = target.stat()
    key = hashlib.sha256(f"{target.resolve()} {made.st_size} {made.st_mtime_ns}".encode()).hexdigest()[:12]
    copy = work / f"{target.stem}-{key}-qwen25-template.gguf"
    if copy.exists():
        return copy
    work.mkdir(parents=True, exist_ok=True)
    partial = copy.with_suffix(".partial")
    print(f"writing {copy} (the target with Qwen 2.5's template, for the tool loop)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", "--force", "--chat-template-file",
                    str(TOOL_TEMPLATE), str(target), str(partial)], check=True, stdout=subprocess.DEVNULL)
    partial.replace(copy)
    return copy


def edit_route(llama_url: str | None, messages: list[dict[str, object]], ours: str) -> str:
    """/v1/chat/completions when llama-server renders the edit as spectui does (`ours`), else /v1/completions."""
    if llama_url is None:
        return CHAT
    theirs = httpx.post(f"{llama_url}/apply-template", json={"messages": messages}, timeout=60).json()
    return CHAT if theirs.get("prompt") == ours else "/v1/completions"


def edit(url: str, route: str, text: str, prompt: str, tokens: int, sampling: dict[str, object]) -> Reply:
    """The edit of `text`, as messages or (on /v1/completions) as spectui's rendering `prompt`;
    `copied`: how much of the file came back (difflib's ratio over lines, 1 = all of it)."""
    body: dict[str, object] = {"max_tokens": tokens, **sampling}
    body |= {"messages": edit_messages(text)} if route == CHAT else {"prompt": prompt}
    reply = ask(url, route, body)
    got = re.sub(r"^\s*```python\n|```\s*$", "", str(reply.extra["text"]))
    reply.extra["copied"] = round(difflib.SequenceMatcher(None, text.splitlines(), got.splitlines()).ratio(), 3)
    return reply


def tool_loop(url: str, tools: list[dict[str, object]], call_tokens: int, answer_tokens: int,
              sampling: dict[str, object]) -> list[Reply]:
    """The call, then the answer to its result (`called`: the server's own call; where it wrote
    none, the answer follows the call the question asks for, so the loop still ends)."""
    call = ask(url, CHAT, {"messages": tool_messages(), "tools": tools, "tool_choice": "required",
                           "parallel_tool_calls": False, "max_tokens": call_tokens, **sampling})
    calls = call.extra["tool_calls"]
    assert isinstance(calls, list)
    called = call.extra["finish_reason"] == "tool_calls" and bool(calls) and complete(calls[0]["arguments"])
    call.extra["called"] = called
    if not called:
        print(f"  {url}: no whole call within {call_tokens} tokens ({call.extra['finish_reason']}): "
              f"{json.dumps(calls or call.extra['text'])[:160]}; the answer follows the expected call", file=sys.stderr)
    made = calls[0] if called else EXPECTED_CALL
    answer = ask(url, CHAT, {"messages": answer_messages(made, made["id"] or "call_1"), "tools": tools,
                             "max_tokens": answer_tokens, **sampling})
    answer.extra["called"] = called
    return [call, answer]


def complete(arguments: str) -> bool:
    try:
        return isinstance(json.loads(arguments), dict)
    except json.JSONDecodeError:
        return False


def ask_workload(workload: str, url: str, route: str, prompt: str, setup: Setup, args: argparse.Namespace,
                 sampling: dict[str, object]) -> dict[str, Reply]:
    """One server's replies to one workload, by row name."""
    if workload == "edit":
        return {"edit": edit(url, route, args.file, prompt, setup.max_tokens, sampling)}
    call, answer = tool_loop(url, args.tools, args.call_tokens, args.answer_tokens, sampling)
    answer.extra["loop_seconds"] = float(call.extra["seconds"]) + float(answer.extra["seconds"])
    return {"tool-call": call, "tool-answer": answer}


def rounds(setup: Setup, args: argparse.Namespace, logs: Path) -> tuple[list[dict[str, object]], str]:
    rows: list[dict[str, object]] = []
    route = args.edit_route
    messages = edit_messages(args.file)
    prompt = rendered(setup.target, [(str(m["role"]), str(m["content"])) for m in messages])
    for round_no in range(1, setup.repeat + 1):
        temperatures = {"T=0": {"temperature": 0}, "T=0.8": {**SAMPLED, "seed": round_no}}
        for label, sampling in ((f"T={t}", temperatures[f"T={t}"]) for t in args.temperature):
            servers = {f"spectui {name}": spectui_server(setup, flags) for name, flags in args.spectui.items()}
            servers |= {f"llama {name}": llama_server(setup, flags) for name, flags in setup.llama_configs.items()}
            with ExitStack() as stack:
                for name, (command, url) in servers.items():
                    log = logs / f"{re.sub(r'[^a-z0-9.]+', '-', name)}-{round_no}-{label}.log"
                    env = {"SPECTUI_HOME": tempfile.mkdtemp(prefix="home-", dir=logs)} if name.startswith("spectui") \
                        else None
                    stack.enter_context(running(command, url, log, env))
                    ask(url, CHAT, {"messages": [{"role": "user", "content": "Warm up."}], "max_tokens": 8,
                                    "temperature": 0})
                if route == "auto":
                    llama = next((url for name, (_c, url) in servers.items() if name.startswith("llama")), None)
                    route = edit_route(llama, messages, prompt)
                    print(f"the edit goes to {route}" + (" on both servers" if llama else ""), file=sys.stderr)
                order = list(servers.items())[::1 if round_no % 2 else -1]
                for workload in args.workload:
                    order.reverse()  # who goes first alternates, by workload and by round
                    for name, (_command, url) in order:
                        try:
                            replies = ask_workload(workload, url, route, prompt, setup, args, sampling)
                        except (RuntimeError, httpx.HTTPError) as error:  # one failed reply: the run goes on
                            print(f"  {label:5} round {round_no} {workload:11} {name:40} failed: {error}",
                                  file=sys.stderr)
                            continue
                        for kind, reply in replies.items():
                            rows.append(row(label, round_no, name, kind, reply))
                            print(f"  {label:5} round {round_no} {kind:11} {name:40} {reply.tokens:5d} tok "
                                  f"{reply.tps:7.1f} tok/s", file=sys.stderr)
            if args.out:  # what is done so far, should a long run be stopped
                args.out.write_text(json.dumps({"partial": True, "edit_route": route, "rows": rows}, indent=2))
    return rows, route


def row(label: str, round_no: int, server: str, workload: str, reply: Reply) -> dict[str, object]:
    extra = reply.extra
    return {"temperature": label, "round": round_no, "server": server, "workload": workload, "tokens": reply.tokens,
            "tps": round(reply.tps, 2), "server_tps": round(float(reply.server_tps or 0), 2),
            "ttft_ms": round(reply.ttft * 1000, 1), "seconds": round(float(extra["seconds"]), 3),
            "prompt_tokens": extra["prompt_tokens"], "drafted": int(extra["draft_n"] or 0),
            "accepted": int(extra["draft_n_accepted"] or 0), "finish_reason": extra["finish_reason"],
            "e2e_tps": round(reply.tokens / float(extra["seconds"]), 2), "loop_seconds": extra.get("loop_seconds"),
            "tool_calls": extra["tool_calls"], "called": extra.get("called"), "copied": extra.get("copied")}


def middle(rows: list[dict[str, object]], key: str) -> dict[str, float]:
    """{key: the median of the rows' `key`}, where they have one."""
    values = [float(str(r[key])) for r in rows if r.get(key) is not None]
    return {key: round(median(values), 3)} if values else {}


def summarize(rows: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    """Per temperature and workload: each server's medians, its speed-up over its own side's
    speculation off, and spectui's default over llama-server's best setting."""
    out: dict[str, dict[str, object]] = {}
    keys = sorted({(str(r["temperature"]), str(r["workload"])) for r in rows}, key=lambda k: (k[0], k[1]))
    for label, workload in keys:
        mine = [r for r in rows if r["temperature"] == label and r["workload"] == workload]
        table: dict[str, dict[str, object]] = {}
        for server in dict.fromkeys(str(r["server"]) for r in mine):
            these = [r for r in mine if r["server"] == server]
            table[server] = {"tps": round(median(float(r["tps"]) for r in these), 2),
                             "server_tps": round(median(float(r["server_tps"]) for r in these), 2),
                             "tokens": sum(int(r["tokens"]) for r in these),
                             "drafted": sum(int(r["drafted"]) for r in these),
                             "accepted": sum(int(r["accepted"]) for r in these),
                             "e2e_tps": round(median(float(r["e2e_tps"]) for r in these), 2),
                             "prompt_tokens": sorted({r["prompt_tokens"] for r in these}, key=str),
                             **middle(these, "loop_seconds"), **middle(these, "copied"),
                             "replies": len(these),
                             **({"called": sum(bool(r["called"]) for r in these)} if workload != "edit" else {})}
        for server, entry in table.items():
            off = table.get("spectui off" if server.startswith("spectui") else "llama none")
            entry["vs_off"] = round(float(entry["tps"]) / float(off["tps"]), 3) if off and off["tps"] else None
        llama = {name: e for name, e in table.items() if name.startswith("llama")}
        best = max(llama, key=lambda name: float(llama[name]["tps"])) if llama else None
        ours = table.get("spectui auto")
        ratio = (round(float(ours["tps"]) / float(llama[best]["tps"]), 3)
                 if ours and best and llama[best]["tps"] else None)
        # the answer's prompt holds each server's own call: only the others must match
        prompts = {str(e["prompt_tokens"]) for e in table.values()} if workload != "tool-answer" else {""}
        out[f"{label} {workload}"] = {"servers": table, "best_llama": best, "spectui_vs_best_llama": ratio,
                                      "same_prompt_tokens": len(prompts) == 1}
    return out


def report(results: dict[str, object]) -> None:
    summary = results["summary"]
    assert isinstance(summary, dict)
    for key, entry in summary.items():
        print(f"\n== {key}  (target {Path(str(results['target'])).name}; edit via {results['edit_route']})")
        for name, e in entry["servers"].items():
            rate = f"{e['accepted']}/{e['drafted']} accepted" if e["drafted"] else ""
            vs_off = f"{e['vs_off']:.2f}x off" if e["vs_off"] else ""
            more = "".join(f"  {key} {e[key]}" for key in ("copied", "loop_seconds") if key in e)
            more += f"  own calls {e['called']}/{e['replies']}" if "called" in e else ""
            print(f"{name:42} {e['tps']:8.1f} tok/s {vs_off:>10}  (server says {e['server_tps']:7.1f}, "
                  f"end to end {e['e2e_tps']:7.1f})  {rate}{more}")
        if entry["spectui_vs_best_llama"] is not None:
            print(f"spectui auto / best llama-server ({entry['best_llama']}): {entry['spectui_vs_best_llama']:.2f}x")
        if not entry["same_prompt_tokens"]:
            print("the servers' prompt_tokens differ: " + ", ".join(
                f"{name} {e['prompt_tokens']}" for name, e in entry["servers"].items()))
    edit = summary.get("T=0 edit")
    if edit and "spectui auto" in edit["servers"] and edit["servers"]["spectui auto"]["vs_off"] is not None \
            and edit["spectui_vs_best_llama"] is not None:
        vs_off, vs_llama = edit["servers"]["spectui auto"]["vs_off"], edit["spectui_vs_best_llama"]
        print(f"\ngoal (the edit at T 0, on the widened pair): >= {GOALS['vs_off']}x off: {vs_off}x; "
              f">= {GOALS['vs_llama']}x llama-server's best: {vs_llama}x")
    print(f"machine: {os.cpu_count()} cores; others' load during the run is not controlled: run it on a quiet one")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_pair_arguments(parser, "a 20-line file, few tokens, 1 round")
    parser.add_argument("--workload", action="append", choices=WORKLOADS, help="only these (repeatable; default both)")
    parser.add_argument("--temperature", action="append", choices=("0", "0.8"),
                        help="only these temperatures (repeatable; default both)")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 3; --tiny 1)")
    parser.add_argument("--edit-tokens", type=int, default=None, help="the edit's most tokens (1400; --tiny 24)")
    parser.add_argument("--call-tokens", type=int, default=None, help="the call's most tokens (default 96; --tiny 120)")
    parser.add_argument("--answer-tokens", type=int, default=None, help="the answer's (default 256; --tiny 16)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--llama-server", type=Path, default=None,
                        help="llama-server (default: scripts/build_llama_cpp.sh's, or SPECTUI_LLAMA_BUILD's)")
    parser.add_argument("--llama-config", action="append", choices=sorted(AGENT_LLAMA),
                        help="only these llama-server settings (repeatable; default: all; --tiny: none and one)")
    parser.add_argument("--no-spectui-off", action="store_true", help="leave out spectui with speculation off")
    parser.add_argument("--no-llama", action="store_true", help="spectui serve only (no llama-server needed)")
    parser.add_argument("--edit-route", choices=("auto", CHAT, "/v1/completions"), default="auto",
                        help="where the edit goes (default: chat, unless llama-server renders it otherwise)")
    parser.add_argument("--work", type=Path, default=None, help="where a copy of the target with a tool-call "
                        "template is kept (default: $TMPDIR/spectui-bench-agent; --tiny: beside the tiny pair)")
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()
    target, draft = pair_files(parser, args)
    llama = args.llama_server or default_llama_bin("llama-server")
    if llama is None and not args.no_llama:
        parser.error("no llama-server found: run scripts/build_llama_cpp.sh, pass --llama-server or --no-llama")
    chosen = args.llama_config or (["none", "ngram-mod,draft-simple n5 p0.75"] if args.tiny else list(AGENT_LLAMA))
    chosen = [] if args.no_llama else chosen
    args.workload = args.workload or list(WORKLOADS)
    args.temperature = args.temperature or ["0", "0.8"]
    args.spectui = {k: v for k, v in SPECTUI_CONFIGS.items() if k == "auto" or not args.no_spectui_off}
    args.call_tokens = args.call_tokens or (120 if args.tiny else 96)
    # the tiny pair's random weights: a file of 20 lines (its vocabulary spends a token per letter
    # or two) and paths from a closed set, so its call ends
    args.file = "".join(FILE.splitlines(keepends=True)[:20]) if args.tiny else FILE
    args.tools = TINY_TOOLS if args.tiny else TOOLS
    args.answer_tokens = args.answer_tokens or (16 if args.tiny else 256)
    work = args.work or (target.parent if args.tiny else Path(tempfile.gettempdir()) / "spectui-bench-agent")
    served = tool_ready(target, work) if "tool" in args.workload else target
    edit_tokens = args.edit_tokens or (24 if args.tiny else 1400)
    setup = Setup(served, draft, edit_tokens, args.repeat or (1 if args.tiny else 3), args.threads, {}, llama,
                  {name: AGENT_LLAMA[name] for name in chosen})
    logs = Path(tempfile.mkdtemp(prefix="spectui-bench-agent-"))
    print(f"server logs in {logs}", file=sys.stderr)
    rows, route = rounds(setup, args, logs)
    results: dict[str, object] = {
        "target": str(target), "served_target": str(served), "draft": str(draft), "edit_route": route,
        "tokens": {"edit": setup.max_tokens, "call": args.call_tokens, "answer": args.answer_tokens},
        "repeat": setup.repeat, "threads": setup.threads, "llama_server": str(llama), "summary": summarize(rows),
        "rows": rows}
    report(results)
    write_results(results, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

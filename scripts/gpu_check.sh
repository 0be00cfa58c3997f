#!/usr/bin/env bash
# Issue #39's whole GPU check in one command on a bare GPU machine without internet: build
# llama-cpp-python for CUDA from the sdist, install spectui, run the lossless tests, then the
# benchmarks on a 7B-shaped pair; every log and JSON lands in $OUT.
#
# $OUT gets back at most 8 files, so it holds gpu_check.log (the stages' progress), stages.tsv,
# tests.log (pytest's output) and results.tar.gz (every log and JSON, refreshed after each
# stage, so a command cut at its limit still returns what was done); the same files are under
# build/gpu/results-<mode>/ on the machine.
#
#   scripts/gpu_prepare.sh                      # first, on a machine with internet (writes build/gpu/)
#   scripts/gpu_check.sh                        # on the GPU machine; the device tool's carry:
#       ["build/gpu/llama_cpp_python-0.3.36-trimmed.tar.xz", "build/gpu/wheels"] (7.5 MiB; not all
#       of build/gpu, which a --cpu run fills with hundreds of MB), timeout_s 600
#   scripts/gpu_check.sh --cpu                  # the same stages on this CPU machine, CPU build
#   scripts/gpu_check.sh --cpu --reuse-venv     # ... with the .venv's llama-cpp-python (no build)
#   scripts/gpu_check.sh --stages bench         # only some stages: deps,build,tools,tests,bench
#   scripts/gpu_check.sh --budget 570           # seconds this command may take (default 570)
#   scripts/gpu_check.sh --tests "tests/test_near_ties.py"   # other test files (a quick check)
#   scripts/gpu_check.sh --workers 12           # the tests on 12 pytest-xdist workers (default: one
#                                               # process, -p no:xdist, as issue #39 asks)
#
# Stages, in order, each timed into $OUT/stages.tsv; one whose estimate no longer fits the
# budget is skipped and says so (a later call on the same warm machine picks up: the build
# and the site under build/gpu/ stay there between calls):
#   deps   the carried wheels (build/gpu/wheels) into build/gpu/site, then an import check
#   build  llama-cpp-python from the trimmed sdist with README's CUDA line plus
#          -DCMAKE_CUDA_ARCHITECTURES=90 (H100/H200), into build/gpu/site; then spectui itself
#   tools  llama-server and llama-speculative-simple from the same build folder (same objects),
#          in the background while the tests run
#   (pair) the 7B-shaped pair, RANDOM weights (scripts/gpu_pair.py), in the background too
#   tests  the lossless test files, -p no:xdist -rf --tb=short, near-tie report on divergence;
#          cut (SIGINT: pytest still prints its summary) so that the benchmarks keep ~150 s
#   bench  on that pair, each step only if its time is left: spectui bench T 0, llama-speculative-
#          simple T 0 / 0.8 (n-max 4/8), spectui bench T 0.8, the memory plan against the
#          device, host ms per cycle (bench_host.py), llama-server against spectui serve
#
# Python: the machine's python3 (its image holds numpy, scipy, pytest, hypothesis, jinja2,
# scikit-build-core, cmake, ninja; /work/.library/device/KINDS.md); the rest comes as wheels.
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
cd "$here"
preload="" mode=gpu reuse_venv=0 budget=570 stages="deps,build,tools,tests,bench" workers=0 tests_override=""
while (( $# )); do
    case "$1" in
        --cpu) mode=cpu ;;
        --reuse-venv) reuse_venv=1 ;;
        --budget) budget="$2"; shift ;;
        --stages) stages="$2"; shift ;;
        --workers) workers="$2"; shift ;;
        --tests) tests_override="$2"; shift ;;
        *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
start=$SECONDS
VERSION=0.3.36
gpu="$here/build/gpu"
tag=$mode
(( reuse_venv )) && tag=cpu-venv
final="${OUT:-$gpu/out-$tag}"
OUT="$gpu/results-$tag"
rm -rf "$OUT"
mkdir -p "$OUT" "$final"
rm -f "$final/gpu_check.log" "$final/stages.tsv" "$final/tests.log" "$final/results.tar.gz"
if [[ $mode == gpu ]]; then
    PY="${PYTHON:-python3}"
    site="$gpu/site"
    build_dir="$gpu/llama-build"
    cmake_args="-DGGML_CUDA=on -DGGML_RPC=ON -DLLAVA_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=90"
    # The first H100 run (docs/BENCHMARKS.md): llama_model_load_from_file crashed in
    # llama_model::print_info inside the std::ostream code libggml-cuda.so carries a copy of,
    # unless the system's libstdc++ was preloaded.
    # Given to what loads models (doctor, tests, benchmarks), not to the compilers.
    [[ -f /lib/x86_64-linux-gnu/libstdc++.so.6 ]] && preload=/lib/x86_64-linux-gnu/libstdc++.so.6
else
    PY="${PYTHON:-/work/main/.venv/bin/python}"
    site="$gpu/cpu-site"
    build_dir="$gpu/cpu-llama-build"
    cmake_args="-DGGML_RPC=ON -DLLAVA_BUILD=OFF"
fi
if [[ $mode == cpu && $reuse_venv == 1 ]]; then
    export PYTHONPATH="$here"
else
    export PYTHONPATH="$site:$here"
fi
export PYTHONUNBUFFERED=1 PYTHONHASHSEED=0 SPECTUI_HOME="$gpu/home-$tag"
jobs="$(nproc)"
threads=$(( jobs < 8 ? jobs : 8 ))
# On a shared CPU machine llama.cpp's OpenMP team waits at every barrier for a descheduled thread
[[ $mode == cpu ]] && threads=1
echo -e "stage\tstatus\tseconds\testimate_gpu_s" > "$OUT/stages.tsv"

log() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - start))s] $*" | tee -a "$OUT/gpu_check.log"; }
left() { echo $(( budget - (SECONDS - start) )); }
want() { [[ ",$stages," == *",$1,"* ]]; }
# run_stage NAME ESTIMATE_SECONDS: skip when fewer seconds are left than the estimate
run_stage() {
    local name=$1 estimate=$2 t0=$SECONDS status
    if ! want "$name"; then return 0; fi
    if (( $(left) < estimate )); then
        log "SKIP $name: $(left) s left of the budget, it needs ~$estimate s (run again with --stages $name)"
        echo -e "$name\tskipped\t0\t$estimate" >> "$OUT/stages.tsv"
        return 0
    fi
    log "BEGIN $name"
    "stage_$name" > "$OUT/$name.log" 2>&1
    status=$?
    log "END $name: exit $status after $((SECONDS - t0)) s (log: $name.log)"
    echo -e "$name\t$status\t$((SECONDS - t0))\t$estimate" >> "$OUT/stages.tsv"
    deliver
    return 0
}

deliver() {  # what comes back: four files (the device returns at most 8)
    cp "$OUT/gpu_check.log" "$OUT/stages.tsv" "$final/" 2>/dev/null
    [[ -f "$OUT/tests.log" ]] && cp "$OUT/tests.log" "$final/"
    tar -czf "$final/results.tar.gz.part" -C "$OUT" . && mv "$final/results.tar.gz.part" "$final/results.tar.gz"
}

facts() {
    echo "mode $mode; budget $budget s; stages $stages; git $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed"
    uname -a; nproc; free -g | head -2; df -h "$here" | tail -1
    "$PY" --version; command -v "$PY"
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_cap --format=csv 2>&1 | head -3
    nvidia-smi 2>&1 | head -4 | tail -2
    nvcc --version 2>&1 | tail -2
    cmake --version | head -1; ninja --version 2>&1
    grep -m1 "model name" /proc/cpuinfo; grep -o -w -m1 amx_int8 /proc/cpuinfo
    echo "LD_PRELOAD for what loads models: ${preload:-none}"
    "$PY" -m pip --version
    "$PY" -m pip list 2>/dev/null | grep -i -E "^(numpy|scipy|pytest|hypothesis|jinja2|scikit-build-core|typing.extensions|huggingface.hub|filelock|prometheus.client|httpx|rich|markdown.it.py|pyyaml|tqdm|anyio|click|h11) "
}

stage_deps() {
    if [[ $mode == cpu ]]; then echo "cpu mode: the .venv has every package"; return 0; fi
    mkdir -p "$site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "$gpu"/wheels/*.whl || return 1
    "$PY" - <<'EOF'
import importlib
missing = []
for name in ["numpy", "jinja2", "typing_extensions", "diskcache", "textual", "pydantic", "platformdirs",
             "gguf", "filelock", "starlette", "uvicorn", "prometheus_client", "huggingface_hub",
             "pytest", "scipy", "hypothesis", "httpx"]:
    try:
        module = importlib.import_module(name)
        print(f"{name:20s} {getattr(module, '__version__', '?'):12s} {getattr(module, '__file__', '')}")
    except Exception as error:  # noqa: BLE001 - reported, then the stage fails
        missing.append(f"{name}: {error}")
print("MISSING:", missing if missing else "none")
raise SystemExit(1 if missing else 0)
EOF
}

stage_build() {
    if [[ $mode == cpu && $reuse_venv == 1 ]]; then echo "--reuse-venv: the .venv's llama-cpp-python"; return 0; fi
    local src="$gpu/src/llama_cpp_python-$VERSION"
    if [[ ! -d "$src" ]]; then
        mkdir -p "$gpu/src" && xz -dc "$gpu/llama_cpp_python-$VERSION-trimmed.tar.xz" | tar -xf - -C "$gpu/src" || return 1
    fi
    if [[ $mode == cpu ]]; then
        # The GPU image has scikit-build-core; the .venv need not: a folder of its own, for this build only
        "$PY" -m pip install -q --target "$gpu/cpu-buildreqs" "scikit-build-core>=0.9.2" || return 1
        local -x PYTHONPATH="$gpu/cpu-buildreqs:$PYTHONPATH"
    fi
    if [[ -f "$site/llama_cpp/lib/libllama.so" && "$(cat "$site/.llama-flags" 2>/dev/null)" == "$cmake_args" ]]; then
        echo "llama-cpp-python already built here with $cmake_args"
    else
        # README's line, plus the one architecture; --target: the image's python is not ours to change
        CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$jobs" \
            nice -n 5 "$PY" -m pip install -v --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade \
            --target "$site" --config-settings=build-dir="$build_dir" "$src" || return 1
        echo "$cmake_args" > "$site/.llama-flags"
    fi
    # spectui itself (its metadata and entry point; a setuptools older than pyproject asks for
    # would stop only this: the tests and benchmarks use the checkout, first on PYTHONPATH)
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade --target "$site" \
        "$here" || echo "gpu_check: spectui's own install failed (above); the checkout is used"
    rm -rf "$site/spectui"
    LD_PRELOAD=$preload "$PY" -m spectui doctor || return 1
}

llama_bin() {
    if [[ $mode == cpu && $reuse_venv == 1 ]]; then
        echo "${SPECTUI_LLAMA_BUILD:-$HOME/.cache/spectui/llama.cpp-$VERSION}/build/bin/$1"
    else
        echo "$build_dir/bin/$1"
    fi
}

stage_tools() {
    if [[ $mode == cpu && $reuse_venv == 1 ]]; then
        ls -la "$(llama_bin llama-speculative-simple)" "$(llama_bin llama-server)"
        return 0
    fi
    # The same build folder pip compiled: ggml and llama are up to date, only the tools compile.
    cmake -S "$gpu/src/llama_cpp_python-$VERSION" -B "$build_dir" -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
        -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF || return 1
    nice -n 5 cmake --build "$build_dir" --target llama-server llama-speculative-simple -j "$jobs" || return 1
    ls -la "$(llama_bin llama-server)" "$(llama_bin llama-speculative-simple)"
}

# The seven files the first H100 run ran (15 of its 114 failed, unseen), then the rest of the
# lossless checks; the scripted target's (no llama.cpp) last.
LOSSLESS_TESTS="tests/test_engine.py tests/test_lossless_sampling.py tests/test_tree.py tests/test_tree_drafters.py
 tests/test_feature_heads.py tests/test_mtp.py tests/test_hybrid.py tests/test_mtp_gemma4.py tests/test_drafters_scripted.py
 tests/test_constrained_sampling.py tests/test_lookup_drafters.py tests/test_sampling_fast.py tests/test_near_ties.py
 tests/test_scripted_target.py"

stage_tests() {
    export LD_PRELOAD=$preload
    [[ -n $tests_override ]] && LOSSLESS_TESTS=$tests_override
    # Seeds: every rng in these files is seeded by a constant in the test (numpy default_rng(...),
    # tiny models' weights), hypothesis by --hypothesis-seed, Python's hashing by PYTHONHASHSEED.
    echo "seeds: PYTHONHASHSEED=$PYTHONHASHSEED hypothesis-seed=0; near-tie reports: $OUT/near_ties.jsonl"
    local limit=$(( $(left) - 20 )) parallel=(-p no:xdist)
    (( limit < 60 )) && limit=60
    (( workers > 0 )) && parallel=(-n "$workers")
    # SIGINT at the limit: pytest still prints its summary of the failures so far
    SPECTUI_NEAR_TIE_LOG="$OUT/near_ties.jsonl" timeout -k 30 --signal=INT "$limit" \
        "$PY" -m pytest $LOSSLESS_TESTS "${parallel[@]}" -p no:cacheprovider -rf --tb=short --durations=25 \
        --hypothesis-seed=0 --junitxml="$OUT/tests.xml" -v
}

stage_pair() {
    local shape=qwen25-7b
    [[ $mode == cpu ]] && shape=small
    nice -n 5 "$PY" scripts/gpu_pair.py "$gpu/pair" --shape "$shape" > "$OUT/pair.json"
}

# step NAME SECONDS STDOUT COMMAND...: one benchmark, run only when SECONDS are still left, cut
# at them; its stdout to the file STDOUT (or the stage's log: -)
step() {
    local name=$1 need=$2 stdout=$3 status=0
    shift 3
    if (( $(left) < need )); then log "  SKIP $name: $(left) s left, it needs ~$need s"; return 0; fi
    log "  $name"
    if [[ $stdout == - ]]; then timeout -k 15 "$need" "$@" || status=$?; else timeout -k 15 "$need" "$@" > "$stdout" || status=$?; fi
    (( status )) && { log "  $name: exit $status"; bench_status=1; }
    deliver
}

stage_bench() {
    export LD_PRELOAD=$preload
    bench_status=0
    cat "$OUT/pair.json" || return 1
    local target draft tokens=128 repeat=2
    target="$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['target'])" "$OUT/pair.json")"
    draft="$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['draft'])" "$OUT/pair.json")"
    [[ $mode == cpu ]] && tokens=24 repeat=1
    local bench=("$PY" -m spectui bench --target "$target" --draft "$draft" -k 4,8,auto --seed 0 --repeat "$repeat"
                 --max-tokens "$tokens" --threads "$threads" --json)
    # The most wanted first: speculation's speed-up and host share at T 0, then llama.cpp's, then T 0.8
    step "spectui bench T 0" 90 "$OUT/bench_spectui_t0.json" "${bench[@]}" --temperature 0
    step "llama-speculative-simple T 0 and 0.8" 90 - "$PY" scripts/gpu_llama_bench.py --target "$target" \
        --draft "$draft" --max-tokens "$tokens" --threads "$threads" --n-max 4,8 \
        --llama-bin "$(llama_bin llama-speculative-simple)" --out "$OUT/bench_llama_spec.json"
    step "spectui bench T 0.8" 90 "$OUT/bench_spectui_t0.8.json" "${bench[@]}" --temperature 0.8
    step "memory plan against the device" 60 - "$PY" scripts/gpu_memory.py --target "$target" --draft "$draft" \
        --out "$OUT/memory.json"
    step "host ms per cycle (bench_host)" 100 - "$PY" scripts/bench_host.py --vocab 152064,262144 -k 8 --rounds 3 \
        --max-tokens 64 --threads "$threads" --dir "$gpu/host-models" --json "$OUT/bench_host.json"
    step "llama-server against spectui serve" 200 - "$PY" scripts/bench_serve.py --part llama --target "$target" \
        --draft "$draft" --repeat 1 --max-tokens "$tokens" --threads "$threads" --prompt code --prompt plan \
        --llama-server "$(llama_bin llama-server)" --llama-config none --llama-config "draft-simple n5 p0.75" \
        --llama-config "draft-simple n8 p0.75" --out "$OUT/bench_serve.json"
    return $bench_status
}

# in_background NAME: a stage that needs the CPU and disk while the tests use the GPU
in_background() {
    local name=$1
    want "$name" || return 0
    log "BEGIN $name (in the background)"
    ( t0=$SECONDS; "stage_$name" > "$OUT/$name.log" 2>&1; status=$?
      log "END $name: exit $status after $((SECONDS - t0)) s (log: $name.log)"
      echo -e "$name\t$status\t$((SECONDS - t0))\tbackground" >> "$OUT/stages.tsv" ) &
    eval "pid_$name=$!"
}

log "gpu_check.sh $mode; output in $OUT"
facts > "$OUT/machine.txt" 2>&1
run_stage deps 30
run_stage build 330
# While the tests run (they wait on the GPU), the CPU compiles llama.cpp's tools and writes the
# 7B-shaped pair; the tests get the time the benchmarks do not need.
in_background tools
if want bench; then stages="$stages,pair"; in_background pair; fi
reserve=0
want bench && reserve=150
budget=$(( budget - reserve ))
run_stage tests 120
budget=$(( budget + reserve ))
for name in tools pair; do
    pid_var="pid_$name"
    if [[ -n "${!pid_var:-}" ]]; then
        log "waiting for $name"
        while kill -0 "${!pid_var}" 2>/dev/null && (( $(left) > 30 )); do sleep 2; done
        kill -0 "${!pid_var}" 2>/dev/null && log "$name still running: the benchmarks that need it are skipped"
    fi
done
[[ -s "$OUT/pair.json" ]] && run_stage bench 60
log "done after $((SECONDS - start)) s"
cat "$OUT/stages.tsv" | tee -a "$OUT/gpu_check.log"
# The end of stdout is what the device tool shows first: the failures and the headline figures.
if [[ -f "$OUT/tests.log" ]]; then
    echo "---- tests (short summary) ----"; sed -n '/short test summary/,$p' "$OUT/tests.log" | cut -c1-300 | tail -40
fi
if [[ -s "$OUT/near_ties.jsonl" ]]; then
    echo "---- divergences from speculation-off's reply (each checked as a near-tie) ----"
    "$PY" - "$OUT/near_ties.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for r in rows[-12:]:
    print(f"{r['label'][:60]}: token {r['position']}, rows differ by {r['rounding']:.3g} (bound {r['bound']:.3g}), "
          f"margins {r['margin_1row']:.3g} / {r['margin_verify_row']:.3g}")
print(f"{len(rows)} divergences; largest row difference {max(r['rounding'] for r in rows):.3g}, "
      f"largest 1-row margin {max(r['margin_1row'] for r in rows):.3g}")
EOF
fi
[[ -f "$OUT/bench.log" ]] && { echo "---- bench ----"; grep -E "^(spectui|llama|host|memory|goal|  )" "$OUT/bench.log" | tail -40; }
deliver

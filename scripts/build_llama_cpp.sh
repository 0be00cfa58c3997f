#!/usr/bin/env bash
# Build llama.cpp's own `llama-speculative-simple` (C++) from the llama.cpp that llama-cpp-python
# 0.3.36 vendors, so scripts/bench_lookup.py can run it beside spectui on the same models; with
# --server also `llama-server` (scripts/bench_serve.py, scripts/bench_wide.py) and `llama-bench`
# (a target pass's cost by rows).
#
#   scripts/build_llama_cpp.sh            # prints llama-speculative-simple's path on its last line
#   scripts/build_llama_cpp.sh --server   # the same, after building llama-server and llama-bench too
#
# Environment:
#   LLAMA_CPP_SDIST   an unpacked llama-cpp-python sdist (default: download it with pip into the
#                     cache; e.g. LLAMA_CPP_SDIST=/work/sdist/llama_cpp_python-0.3.36)
#   SPECTUI_LLAMA_BUILD  where to download and build (default ~/.cache/spectui/llama.cpp-0.3.36)
#   PYTHON            the Python whose pip downloads the sdist (default .venv/bin/python, else python3)
#   JOBS              parallel compile jobs (default: the number of cores)
#
# Only the named targets are built (llama, ggml, llama-common and the example; --server adds the
# server's libraries and mtmd), CPU only, with -DGGML_NATIVE=ON: about 8 minutes on 2 busy cores
# for the example alone. The server embeds no web UI (LLAMA_USE_PREBUILT_UI=OFF: no download;
# its API is all the benchmarks use). A second run reuses the build. The binaries stay in the
# cache; never commit them.
set -euo pipefail

targets=(llama-speculative-simple)
if [[ "${1:-}" == "--server" ]]; then targets+=(llama-server llama-bench); fi

VERSION=0.3.36
CACHE="${SPECTUI_LLAMA_BUILD:-$HOME/.cache/spectui/llama.cpp-$VERSION}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
here="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    if [[ -x "$here/.venv/bin/python" ]]; then PYTHON="$here/.venv/bin/python"; else PYTHON=python3; fi
fi
mkdir -p "$CACHE"

sdist="${LLAMA_CPP_SDIST:-}"
if [[ -z "$sdist" ]]; then
    sdist="$CACHE/llama_cpp_python-$VERSION"
    if [[ ! -d "$sdist/vendor/llama.cpp" ]]; then
        echo "downloading the llama-cpp-python $VERSION sdist into $CACHE ..." >&2
        "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$CACHE"
        tar -xzf "$CACHE/llama_cpp_python-$VERSION.tar.gz" -C "$CACHE"
    fi
fi
source_dir="$sdist/vendor/llama.cpp"
if [[ ! -f "$source_dir/examples/speculative-simple/speculative-simple.cpp" ]]; then
    echo "build_llama_cpp.sh: $source_dir has no examples/speculative-simple; set LLAMA_CPP_SDIST to an unpacked llama-cpp-python $VERSION sdist" >&2
    exit 1
fi

build="$CACHE/build"
no_amx=()
# This llama.cpp's AMX kernels fault on their first tile instruction (SIGILL on a Q8_0 model; see
# spectui/engine/llama/build_info.py:cpu_extra_buffers_usable): on a CPU with AMX, build them out. The
# tools keep their repacked layouts, which spectui gives up on such a host: the yardstick's favour.
if grep -qw amx_int8 /proc/cpuinfo 2>/dev/null; then no_amx=(-DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8); fi
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
if [[ -f "$build/CMakeCache.txt" ]] && ! grep -q "^LLAMA_BUILD_SERVER:BOOL=ON" "$build/CMakeCache.txt"; then
    rm "$build/CMakeCache.txt"  # configured by an older version of this script, without the tools
fi
if [[ ! -f "$build/CMakeCache.txt" ]]; then
    cmake -S "$source_dir" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF "${no_amx[@]}" >&2
fi
cmake --build "$build" --target "${targets[@]}" -j "$JOBS" >&2
for target in "${targets[@]}"; do
    [[ -x "$build/bin/$target" ]] || { echo "build_llama_cpp.sh: the build finished without $build/bin/$target" >&2; exit 1; }
done
binary="$build/bin/llama-speculative-simple"
[[ -x "$binary" ]] || { echo "build_llama_cpp.sh: the build finished without $binary" >&2; exit 1; }
echo "$binary"

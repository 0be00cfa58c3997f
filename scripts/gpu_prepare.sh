#!/usr/bin/env bash
# Prepare, on a machine with internet, what scripts/gpu_check.sh needs on a GPU machine without:
#
#   scripts/gpu_prepare.sh            # writes build/gpu/ (ignored by git), prints its size
#
# build/gpu/llama_cpp_python-0.3.36-trimmed.tar.xz
#     the llama-cpp-python 0.3.36 sdist without what no build reads: vendor/llama.cpp's models/
#     (vocab-only GGUFs for llama.cpp's own tests), tests/ (LLAMA_BUILD_TESTS is off), docs/,
#     media/, benches/, gguf-py/ and the converters, the git history (38 MB: llama.cpp's build
#     info then says "unknown", as it did on the first H100 run), the web UI's npm sources (tools/ui/src, tests: the server is built without its
#     UI), ggml backends other than CPU/CUDA/RPC/BLAS, and the sdist's own docs/examples/tests.
#     The whole sdist is 76 MB, over the 64 MiB a GPU machine is sent; this is 3.9 MB (xz).
# build/gpu/wheels/*.whl
#     the Python packages spectui and its lossless tests import that the GPU machine's image
#     lacks (its list: /work/.library/device/KINDS.md, "Python packages already there"), for
#     CPython 3.12 on manylinux x86-64, at the versions this checkout's .venv holds.
#
# Then send these two with the command (the device tool's `carry:
# ["build/gpu/llama_cpp_python-0.3.36-trimmed.tar.xz", "build/gpu/wheels"]`) and run
# `scripts/gpu_check.sh` there. Environment: LLAMA_CPP_SDIST_TGZ (the sdist tarball; default
# /work/src/llama_cpp_python-0.3.36.tar.gz, else pip downloads it), PYTHON (default .venv/bin/python).
set -euo pipefail

VERSION=0.3.36
here="$(cd "$(dirname "$0")/.." && pwd)"
out="$here/build/gpu"
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    if [[ -x "$here/.venv/bin/python" ]]; then PYTHON="$here/.venv/bin/python"; else PYTHON=/work/main/.venv/bin/python; fi
fi
mkdir -p "$out/wheels"
work="$(mktemp -d "$out/tmp.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# ---- the trimmed sdist ---------------------------------------------------------------------------
tgz="${LLAMA_CPP_SDIST_TGZ:-/work/src/llama_cpp_python-$VERSION.tar.gz}"
if [[ ! -f "$tgz" ]]; then
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$work"
    tgz="$work/llama_cpp_python-$VERSION.tar.gz"
fi
trimmed="$out/llama_cpp_python-$VERSION-trimmed.tar.xz"
if [[ ! -f "$trimmed" ]]; then
    tar -xzf "$tgz" -C "$work"
    src="$work/llama_cpp_python-$VERSION"
    lc="$src/vendor/llama.cpp"
    rm -rf "$src/.git" "$src/docs" "$src/examples" "$src/tests" \
        "$lc/models" "$lc/docs" "$lc/media" "$lc/benches" "$lc/gguf-py" "$lc/conversion" "$lc/convert_"*.py \
        "$lc/tools/ui/src" "$lc/tools/ui/tests" "$lc/tools/ui/package-lock.json" "$lc/tests" \
        "$lc/tools/mtmd/tests" "$lc/tools/mtmd/"*.mp4
    # ggml adds a backend's folder only when that backend is asked for (ggml/src/CMakeLists.txt,
    # ggml_add_backend): keep CPU, CUDA (HIP and MUSA read its sources), RPC and BLAS.
    for backend in cann et hexagon metal opencl openvino sycl virtgpu vulkan webgpu zdnn zendnn; do
        rm -rf "$lc/ggml/src/ggml-$backend"
    done
    tar -C "$work" -cf - "llama_cpp_python-$VERSION" | xz -T2 -6 > "$trimmed.part"
    mv "$trimmed.part" "$trimmed"
fi

# ---- wheels for what the GPU image lacks ---------------------------------------------------------
# Import closure of spectui (runtime) and of the lossless test files, minus the image's packages.
# Pinned to this .venv's versions, so the GPU run tests the same libraries as the CPU's.
# (Derived 2026-11-26 by walking the requirements of spectui, pytest, scipy, hypothesis and httpx
# in the .venv. The image's huggingface_hub 1.33 is kept: 2.x would bring httpx2, httpcore2 and
# truststore, and no lossless test reaches the Hub.)
missing=(diskcache textual linkify-it-py mdit-py-plugins pydantic pydantic-core annotated-types
         typing-inspection platformdirs gguf starlette uvicorn)
specs=()
for name in "${missing[@]}"; do
    version="$("$PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")"
    specs+=("$name==$version")
done
have=$(ls "$out/wheels" 2>/dev/null | wc -l)
if (( have < ${#specs[@]} )); then
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$out/wheels" "${specs[@]}"
fi
printf '%s\n' "${specs[@]}" > "$out/wheels/versions.txt"

du -b "$trimmed" "$out/wheels" | awk '{ printf "%8.1f MiB  %s\n", $1 / 1048576, $2 }'
echo "in all (the working tree's tracked files travel beside it):"
du -sb "$out" | awk '{ printf "%8.1f MiB  %s\n", $1 / 1048576, $2 }'

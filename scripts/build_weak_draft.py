"""A draft too weak to pay: the first layers of a llama GGUF, for the "never slower" sweep.

    python scripts/build_weak_draft.py SRC.gguf DST.gguf --layers 24

Issue #35 asks that K = auto never make a reply slower on a pair whose draft is too weak
(acceptance under ~30 %) as well as too costly or excellent. No such pair can be pulled here, so
this keeps the first `--layers` blocks of a model (its embedding, final norm and output head too),
tensor bytes copied as they are (any quantization): the same tokenizer as the target, a few
layers' cost, and text that only sometimes agrees with the full model's. SmolLM2-135M's first 24
of 30 layers (Q8_0) against the demo's F32 target accepted 24 % of greedy drafts at K = 3 (4 layers:
1.5 %, 12: 5 %, 20: 15 %, 27: 34 %); see docs/BENCHMARKS.md ("never slower").
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


def truncate(src: Path, dst: Path, layers: int) -> int:
    """Write `src` with only blocks 0..layers-1 to `dst`; returns the source's block count."""
    from gguf import GGUFReader, GGUFWriter

    from spectui.catalog.widen import add_field

    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    count_key = f"{arch}.block_count"
    blocks = int(reader.fields[count_key].contents())
    if not 1 <= layers < blocks:
        raise ValueError(f"--layers must be 1..{blocks - 1} for a model of {blocks} blocks")
    writer = GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value = field.contents()
        if key == count_key:
            value = layers
        elif isinstance(value, list) and len(value) == blocks and key.startswith(f"{arch}."):
            value = value[:layers]  # per-layer values
        elif key == "general.name":
            value = f"{value} (first {layers} of {blocks} layers)"
        add_field(writer, key, field, value)
    kept = [t for t in reader.tensors
            if (m := re.match(r"blk\.(\d+)\.", t.name)) is None or int(m.group(1)) < layers]
    for tensor in kept:
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return blocks


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path)
    parser.add_argument("--layers", type=int, default=24)
    args = parser.parse_args(argv)
    if args.dst.exists():
        print(f"build_weak_draft: {args.dst} exists; remove it first", file=sys.stderr)
        return 1
    tmp = args.dst.with_name(args.dst.name + ".part")
    try:
        blocks = truncate(args.src, tmp, args.layers)
    except (OSError, ValueError, KeyError) as error:
        tmp.unlink(missing_ok=True)
        print(f"build_weak_draft: {error}", file=sys.stderr)
        return 1
    tmp.replace(args.dst)
    print(f"{args.dst}: the first {args.layers} of {blocks} layers of {args.src.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

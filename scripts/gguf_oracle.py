#!/usr/bin/env python3
"""Dequantizes every tensor of a GGUF file with gguf-py's numpy dequantizers (the `gguf` PyPI
package, an implementation independent of ours) and streams the values to stdout, so a test can
compare them bit for bit with hetero_sme::dequantize_row (engine-min/tests/gguf_oracle.rs).

    gguf_oracle.py FILE.gguf > stream

Stream, per tensor in file order, little-endian: u32 name length, the UTF-8 name, u32 GGML type
code, u64 element count, then the elements as f32. Needs numpy and gguf (scripts/setup.sh
installs both, pinned, into $HETERO_CACHE/gguf-py; run with that venv's python).
"""
import struct
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import numpy as np
        from gguf import GGUFReader
        from gguf.quants import dequantize
    except ImportError as e:
        print(f"gguf_oracle: missing Python package ({e}); run scripts/setup.sh gguf-py", file=sys.stderr)
        return 1
    reader = GGUFReader(sys.argv[1])
    out = sys.stdout.buffer
    for t in reader.tensors:
        values = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype="<f4")
        name = t.name.encode()
        out.write(struct.pack("<I", len(name)) + name)
        out.write(struct.pack("<IQ", int(t.tensor_type), values.size))
        out.write(memoryview(values.reshape(-1)).cast("B"))
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

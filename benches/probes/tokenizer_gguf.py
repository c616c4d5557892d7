"""Writes a GGUF holding only the tokenizer keys of another GGUF (no tensors).

    python tokenizer_gguf.py SRC.gguf OUT.gguf

`engine-min synth --tokenizer OUT.gguf` copies its tokenizer from such a file: the 98 MB SmolLM2
model cannot travel to the H200 machine (64 MiB a call), its tokenizer (1.7 MB) can. Runs with
the gguf-py oracle's Python (`scripts/setup.sh gguf-py`, HETERO_GGUF_PYTHON).
"""
import sys

import gguf

src, out = sys.argv[1], sys.argv[2]
r = gguf.GGUFReader(src)
w = gguf.GGUFWriter(out, arch="llama")
n = 0
for name, f in r.fields.items():
    if not name.startswith("tokenizer."):
        continue
    t = f.types
    if t[0] == gguf.GGUFValueType.ARRAY:
        if t[1] == gguf.GGUFValueType.STRING:
            val = [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
        else:
            val = [f.parts[i].tolist()[0] for i in f.data]
        w.add_array(name, val)
    elif t[0] == gguf.GGUFValueType.STRING:
        w.add_string(name, bytes(f.parts[f.data[0]]).decode())
    else:
        w.add_key_value(name, f.parts[f.data[0]].tolist()[0], t[0])
    n += 1
if n == 0:
    sys.exit(f"{src}: no tokenizer.* keys")
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"{out}: {n} tokenizer keys from {src}")

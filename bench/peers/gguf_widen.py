#!/usr/bin/env python3
"""gguf_widen.py — copy a GGUF file with every tensor dequantized to F32 (or F16), for
benchmarks that run the same numbers through llama.cpp and through the library
(bench_generate --gguf: a published model ships quantized; its widened copy is the
"same weights in f32" both sides load). Metadata is copied field by field; only
general.file_type changes. Uses the reference reader/writer and dequantizer of the
`gguf` package.

    python3 bench/peers/gguf_widen.py IN.gguf OUT.gguf [--type f32|f16]
"""
import argparse
import sys

import numpy as np

try:
    import gguf
    from gguf import quants
except ImportError:
    sys.exit("gguf_widen.py: needs the gguf package (pip install gguf)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--type", choices=("f32", "f16"), default="f32")
    a = ap.parse_args()
    reader = gguf.GGUFReader(a.src)
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    writer = gguf.GGUFWriter(a.dst, arch)
    out_type = gguf.GGMLQuantizationType.F32 if a.type == "f32" else gguf.GGMLQuantizationType.F16
    file_type = gguf.LlamaFileType.ALL_F32 if a.type == "f32" else gguf.LlamaFileType.MOSTLY_F16
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        if field.name == gguf.Keys.General.FILE_TYPE:
            writer.add_file_type(int(file_type))
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    arrays = []
    for t in reader.tensors:
        x = quants.dequantize(t.data, t.tensor_type)  # numpy shape: GGUF dims reversed
        # 1-D tensors (norms) stay F32 as llama.cpp's converter keeps them
        dt = np.float32 if (a.type == "f32" or x.ndim == 1) else np.float16
        x = np.ascontiguousarray(x.astype(dt))
        arrays.append(x)
        writer.add_tensor_info(t.name, x.shape, x.dtype, x.nbytes,
                               gguf.GGMLQuantizationType.F32 if dt == np.float32 else out_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for x in arrays:
        writer.write_tensor_data(x)
    writer.close()
    print(f"{a.dst}: {len(arrays)} tensors, {sum(x.nbytes for x in arrays) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()

"""Writes a safetensors file from torch tensors with the standard library (struct, json): the scripts that make
reference data need no `safetensors` package (Debian has none)."""
import json
import struct

import torch

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}


def save(path, tensors, metadata):
    """tensors: name -> torch tensor (float32, float64, int32, int64, bool: one byte 0 or 1 each, as safetensors'
    own writer stores BOOL); metadata: str -> str. Little-endian data, the header padded with spaces to a multiple
    of 8 bytes."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        a = t.numpy()
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text.encode())
        for b in blobs:
            f.write(b)

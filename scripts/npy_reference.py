#!/usr/bin/env python3
"""Writes the .npy files that tests/unit/test_npy.cpp reads, with numpy.save itself (so that the test reads numpy's
own headers, padding and data, not attnx's idea of them), and prints every value as the test spells it.

    /usr/bin/python3 scripts/npy_reference.py [OUTPUT_DIR]   (default: tests/data/npy)

Needs Debian's python3-numpy (it comes with python3-torch). Files (a few hundred bytes in all):
  f4_2x3.npy   float32 (2, 3): values exact in float32 except 1/3, computed in float32 as the test computes it
  f8_4.npy     float64 (4,): 0.1, -1/3, 1e300, -0.0 (the nearest doubles, as C++ rounds the same literals)
  i8_2x2.npy   int64 (2, 2): the extremes and 2^40 + 1 (not exact in float32)
  b1_3x3.npy   bool (3, 3): a causal mask in PyTorch's polarity (True above the diagonal: blocked), the array
               that torch.ones(3, 3, dtype=torch.bool).triu(1).numpy() hands to numpy.save
  f4_fortran.npy  the float32 array in Fortran order (numpy.save of a Fortran-ordered copy): refused by attnx
  i4_v2.npy    int32 (3,), written as format version 2.0 (a 4-byte header length; numpy.save picks it for headers
               beyond 65535 bytes)
  u1_v3.npy    uint8 (2, 2) holding 0 and 1 (a mask as older PyTorch kept them), written as format version 3.0 (a
               UTF-8 header)
"""
import os
import sys

import numpy as np


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "npy")
    os.makedirs(out, exist_ok=True)
    third = np.float32(1) / np.float32(3)
    arrays = {
        "f4_2x3.npy": np.array([[1.5, -2.25, third], [0.0, 1e-3, -65504.0]], dtype=np.float32),
        "f8_4.npy": np.array([0.1, -1.0 / 3.0, 1e300, -0.0], dtype=np.float64),
        "i8_2x2.npy": np.array([[-(2**63), 2**63 - 1], [2**40 + 1, -7]], dtype=np.int64),
        "b1_3x3.npy": np.triu(np.ones((3, 3), dtype=np.bool_), 1),
    }
    for name, a in arrays.items():
        np.save(os.path.join(out, name), a)
    f = np.asfortranarray(arrays["f4_2x3.npy"])
    assert f.flags.f_contiguous and not f.flags.c_contiguous
    np.save(os.path.join(out, "f4_fortran.npy"), f)
    for name, a, version in [("i4_v2.npy", np.array([-2147483648, 0, 2147483647], dtype=np.int32), (2, 0)),
                             ("u1_v3.npy", np.array([[0, 1], [1, 1]], dtype=np.uint8), (3, 0))]:
        with open(os.path.join(out, name), "wb") as fp:
            np.lib.format.write_array(fp, a, version=version)
    for name in sorted(os.listdir(out)):
        a = np.load(os.path.join(out, name))
        print("%s: %s %s, %d bytes: %s" % (name, a.dtype, a.shape, os.path.getsize(os.path.join(out, name)),
                                           [float(v).hex() if a.dtype.kind == "f" else int(v) for v in a.ravel(order="K")]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

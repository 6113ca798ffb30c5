"""Runs the command it is given where this Python's torch is torch 2, and
exits 77 (ctest's skipped), saying why, where it is older or missing.

    python3 needs_torch2.py COMMAND [ARG...]
"""

import os
import sys

try:
    import torch
    major = int(torch.__version__.split(".")[0])
except ImportError:
    major = None
if major is None or major < 2:
    found = "no torch" if major is None else "torch " + torch.__version__
    print(f"SKIP: needs torch 2 (DeviceMesh, functional collectives, torchrun's --local-addr); "
          f"this python3 has {found}")
    sys.exit(77)
os.execvp(sys.argv[1], sys.argv[1:])

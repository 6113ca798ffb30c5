"""Runs the command it is given where this Python's torch is torch 2, and
exits 77 (ctest's skipped), saying why, where it is older or missing.

    python3 needs_torch2.py COMMAND [ARG...]
"""

import importlib.metadata
import os
import sys

# The installed package's version, read without importing torch (a second
# of processor time that a skip would spend for nothing); torch's own where
# the package has no metadata.
try:
    version = importlib.metadata.version("torch")
except importlib.metadata.PackageNotFoundError:
    try:
        import torch
        version = torch.__version__
    except ImportError:
        version = None
try:
    major = int(version.split(".")[0]) if version else None
except ValueError:
    major = None
if major is None or major < 2:
    found = "no torch" if version is None else "torch " + version
    print(f"SKIP: needs torch 2 (DeviceMesh, functional collectives, torchrun's --local-addr); "
          f"this python3 has {found}")
    sys.exit(77)
os.execvp(sys.argv[1], sys.argv[1:])

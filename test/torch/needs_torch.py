"""Runs the command it is given where this Python has torch (torch 2 or
later with --torch2), and exits 77 (ctest's skipped), saying why, where
torch is older or missing.

    python3 needs_torch.py [--torch2] COMMAND [ARG...]

Neither check imports torch: an import costs a second of processor time,
and every rank the command starts pays it again.
"""

import importlib.metadata
import importlib.util
import os
import sys

args = sys.argv[1:]
torch2 = bool(args) and args[0] == "--torch2"
if torch2:
    args = args[1:]
if not args:
    sys.exit(__doc__)

if importlib.util.find_spec("torch") is None:
    print("SKIP: python3-torch is not installed")
    sys.exit(77)

if torch2:
    # The installed package's version; torch's own where the package has
    # no metadata.
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        import torch
        version = torch.__version__
    try:
        major = int(version.split(".")[0])
    except ValueError:
        major = None
    if major is None or major < 2:
        print(f"SKIP: needs torch 2 (DeviceMesh, functional collectives, torchrun's "
              f"--local-addr); this python3 has torch {version}")
        sys.exit(77)
os.execvp(args[0], args)

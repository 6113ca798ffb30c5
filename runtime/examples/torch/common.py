"""How the examples start: under a launcher (collie launch, torchrun: RANK is
set) each process runs main(); run directly, they start 4 processes with
torch's mp.spawn, meeting in a file store (no port to choose)."""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import collie_torch  # noqa: F401  (registers the backend "collie")

BACKEND = os.environ.get("BACKEND", "collie")


def _spawned(rank, size, path, main):
    dist.init_process_group(BACKEND, init_method="file://" + path, rank=rank, world_size=size)
    main(rank, size)
    dist.destroy_process_group()


def run(main, default_size=4):
    if "RANK" in os.environ:  # env://, as the launcher set it
        dist.init_process_group(BACKEND)
        main(dist.get_rank(), dist.get_world_size())
        # Every rank is done before any drops the group: torch 2.6's gloo
        # can hang destroying a group whose peers have exited (under torchrun
        # as under collie launch).
        dist.barrier()
        dist.destroy_process_group()
        return
    size = int(sys.argv[1]) if len(sys.argv) > 1 else default_size
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_spawned, args=(size, os.path.join(d, "store"), main), nprocs=size)


def weights_equal_everywhere(model):
    """True if every rank holds the same weights as this one, bit for bit;
    returns them flat as well."""
    flat = torch.cat([p.data.reshape(-1) for p in model.parameters()])
    copies = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(copies, flat)
    return all(torch.equal(c, flat) for c in copies), flat

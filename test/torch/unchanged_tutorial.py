"""torch's tutorial program (pytorch.org, "Writing Distributed Applications
with PyTorch": run() with all_reduce, under init_process), unchanged but for
the backend name: no `import collie_torch`. Started by collie launch, whose
PYTHONPATH makes "collie" known (runtime/torch/sitecustomize.py)."""
import os
import torch
import torch.distributed as dist


def run(rank, size):
    """ Simple collective communication. """
    group = dist.new_group(list(range(size)))
    tensor = torch.ones(1)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    print('Rank ', rank, ' has data ', tensor[0])
    assert tensor[0].item() == size, tensor


def init_process(rank, size, fn, backend='collie'):
    """ Initialize the distributed environment. """
    dist.init_process_group(backend, rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    init_process(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), run)

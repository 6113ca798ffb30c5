"""A small model trained with nn.parallel.DistributedDataParallel on the
collie backend: DDP averages the gradients in buckets with all_reduce and
its future (the default communication hook)."""

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from common import run, weights_equal_everywhere


def main(rank, size):
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(10):
        x = torch.randn(32, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    same, flat = weights_equal_everywhere(model)
    assert same, "DDP replicas differ"
    print(f"rank {rank}: DDP trained 10 steps, replicas equal, checksum {flat.sum().item():.6f}")


if __name__ == "__main__":
    run(main)

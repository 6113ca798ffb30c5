"""Distributed synchronous SGD (torch's tutorial): each rank trains on its
own shard, and gradients are averaged with all_reduce after every backward
pass, so every rank ends with the same weights."""

import torch
import torch.distributed as dist
import torch.nn as nn

from common import run, weights_equal_everywhere


def average_gradients(model):
    size = float(dist.get_world_size())
    for p in model.parameters():
        dist.all_reduce(p.grad.data, op=dist.ReduceOp.SUM)
        p.grad.data /= size


def main(rank, size):
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(256, 10, generator=g)
    y = x.sum(dim=1, keepdim=True)
    for epoch in range(20):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        average_gradients(model)
        opt.step()
    # Every rank holds the same weights, bit for bit.
    same, _ = weights_equal_everywhere(model)
    assert same, "the ranks' weights differ"
    print(f"rank {rank}: loss {loss.item():.4f}, weights equal on all {size} ranks")


if __name__ == "__main__":
    run(main)

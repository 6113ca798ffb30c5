"""Sharded data parallel training of a small model on collie: every
parameter sharded across the ranks, gathered for each layer's forward and
backward (all_gather_into_tensor), gradients reduce-scattered. Each rank
trains on its part of every batch; the weights it ends with must be those of
one process that trained the same model on the whole batches.

FSDP2 (torch 2's fully_shard) where this torch runs it on CPU tensors;
torch 2.6 does not, on any backend (its CPU streams have no record_event),
and there the first FSDP (FullyShardedDataParallel) runs instead, saying
so."""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

from common import run

STEPS, BATCH = 5, 24


def batches():
    g = torch.Generator().manual_seed(42)
    return [(torch.randn(BATCH, 16, generator=g), torch.randn(BATCH, 4, generator=g))
            for _ in range(STEPS)]


def trained(model, data, part=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data:
        if part is not None:
            x, y = x.chunk(part[1])[part[0]], y.chunk(part[1])[part[0]]
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def main(rank, size):
    torch.manual_seed(0)
    start = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 4))
    reference = trained(copy.deepcopy(start), batches())
    model = copy.deepcopy(start)
    if hasattr(torch.cpu.Stream, "record_event"):
        kind = "FSDP2"
        mesh = init_device_mesh("cpu", (size,))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        trained(model, batches(), part=(rank, size))
        weights = [p.full_tensor() for p in model.parameters()]  # DTensors: gathers the shards
    else:
        kind = "FSDP (torch's first; FSDP2 needs CPU streams with record_event)"
        model = FullyShardedDataParallel(model, device_id=torch.device("cpu"),
                                         use_orig_params=True)
        trained(model, batches(), part=(rank, size))
        with FullyShardedDataParallel.summon_full_params(model):
            weights = [p.detach().clone() for p in model.parameters()]
    worst = 0.0
    for (name, _), full, q in zip(start.named_parameters(), weights, reference.parameters()):
        worst = max(worst, (full - q.data).abs().max().item())
        assert torch.allclose(full, q.data, rtol=1e-5, atol=1e-6), \
            f"{name}: {kind}'s weights differ from one process's by {worst}"
    print(f"rank {rank}: {kind} trained {STEPS} steps on {size} ranks, weights as one "
          f"process's (max difference {worst:.2e})")
    dist.barrier()


if __name__ == "__main__":
    run(main)

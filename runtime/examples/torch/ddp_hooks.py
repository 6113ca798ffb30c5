"""DistributedDataParallel with torch's communication hooks on collie: the
default all_reduce hook, fp16 and bf16 compression, and PowerSGD (bf16
where torch offers it: torch 2.6's hook refuses to run without CUDA 11 and
NCCL 2.10, whatever the group's backend). The same
model, from the same weights, on the same batches, trains once on collie
(the default group) and once on gloo (a group of the same ranks) with each
hook; the weights must agree (to the precision the hook keeps) and be the
same on every rank."""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from common import run, weights_equal_everywhere


def hooks(group):
    """(name, state, hook, tolerance) for each hook, its state on `group`."""
    power = powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=2,
                                        start_powerSGD_iter=2, random_seed=7)
    listed = [("allreduce", group, default_hooks.allreduce_hook, 1e-5),
              ("fp16_compress", group, default_hooks.fp16_compress_hook, 2e-3),
              ("powerSGD", power, powerSGD_hook.powerSGD_hook, 1e-3)]
    if torch.cuda.is_available():
        listed.append(("bf16_compress", group, default_hooks.bf16_compress_hook, 2e-2))
    return listed


def train(model, group, state, hook, rank):
    ddp = DDP(model, process_group=group)
    ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(6):
        x = torch.randn(16, 12, generator=g)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return ddp


def main(rank, size):
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    start = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 4))
    for (name, state, hook, tolerance), (_, gloo_state, gloo_hook, _) in zip(
            hooks(dist.group.WORLD), hooks(gloo)):
        on_collie = train(copy.deepcopy(start), None, state, hook, rank)
        on_gloo = train(copy.deepcopy(start), gloo, gloo_state, gloo_hook, rank)
        same, flat = weights_equal_everywhere(on_collie)
        assert same, f"{name}: DDP replicas on collie differ"
        reference = torch.cat([p.data.reshape(-1) for p in on_gloo.parameters()])
        worst = (flat - reference).abs().max().item()
        assert torch.allclose(flat, reference, rtol=tolerance, atol=tolerance), \
            f"{name}: collie's weights differ from gloo's by up to {worst}"
        print(f"rank {rank}: DDP hook {name}: 6 steps, weights as gloo's (max difference "
              f"{worst:.2e}), replicas equal")


if __name__ == "__main__":
    run(main)

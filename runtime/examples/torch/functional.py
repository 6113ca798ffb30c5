"""torch 2's functional collectives (torch.distributed._functional_collectives,
what torch.compile and DTensor call) on collie: each returns a new tensor
that is waited for when used. Every result is checked against what each
rank's input says it must be."""

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

from common import run


def main(rank, size):
    group = dist.group.WORLD
    x = torch.arange(4 * size, dtype=torch.float32) + 100 * rank
    total = sum(torch.arange(4 * size, dtype=torch.float32) + 100 * r for r in range(size))

    s = funcol.all_reduce(x, "sum", group)
    assert torch.equal(s, total), s
    m = funcol.all_reduce(x, "max", group)
    assert torch.equal(m, torch.arange(4 * size, dtype=torch.float32) + 100 * (size - 1)), m

    gathered = funcol.all_gather_tensor(torch.full((2, 3), float(rank)), 0, group)
    want = torch.cat([torch.full((2, 3), float(r)) for r in range(size)])
    assert torch.equal(gathered, want), gathered

    part = funcol.reduce_scatter_tensor(x, "sum", 0, group)
    assert torch.equal(part, total.chunk(size)[rank]), part

    a2a = funcol.all_to_all_single(torch.arange(size, dtype=torch.float32) + 10 * rank,
                                   None, None, group)
    assert torch.equal(a2a, torch.tensor([rank + 10.0 * r for r in range(size)])), a2a

    b = funcol.broadcast(torch.full((3,), float(rank)), 0, group)
    assert torch.equal(b, torch.zeros(3)), b

    many = funcol.all_reduce_coalesced([torch.ones(3) * rank, torch.ones(2)], "sum", group)
    assert torch.equal(many[0], torch.ones(3) * sum(range(size))) and \
        torch.equal(many[1], torch.ones(2) * size), many
    print(f"rank {rank}: functional all_reduce, all_gather, reduce_scatter, all_to_all, "
          f"broadcast and coalesced all_reduce as expected")


if __name__ == "__main__":
    run(main)

"""The six collectives of torch's tutorial (broadcast, reduce, all_reduce,
gather, all_gather, scatter) on a group of all ranks and on a sub-group,
every value checked against what the ranks' inputs give."""

import torch
import torch.distributed as dist

from common import run


def main(rank, size):
    ranks = list(range(size))

    t = torch.tensor([float(rank)] * 3) if rank == 1 % size else torch.zeros(3)
    dist.broadcast(t, src=1 % size)
    assert t.tolist() == [float(1 % size)] * 3, t

    t = torch.tensor([rank + 1.0, 2.0 * rank])
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
    if rank == 0:
        assert t.tolist() == [sum(r + 1.0 for r in ranks), sum(2.0 * r for r in ranks)], t

    t = torch.tensor([rank + 1], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    expected = 1
    for r in ranks:
        expected *= r + 1
    assert t.item() == expected, t

    mine = torch.tensor([rank, rank * rank], dtype=torch.int32)
    bucket = [torch.zeros(2, dtype=torch.int32) for _ in ranks] if rank == 0 else None
    dist.gather(mine, gather_list=bucket, dst=0)
    if rank == 0:
        assert [b.tolist() for b in bucket] == [[r, r * r] for r in ranks], bucket

    everyone = [torch.zeros(2, dtype=torch.int32) for _ in ranks]
    dist.all_gather(everyone, mine)
    assert [e.tolist() for e in everyone] == [[r, r * r] for r in ranks], everyone

    piece = torch.zeros(2)
    pieces = [torch.tensor([10.0 * r, 10.0 * r + 1]) for r in ranks] if rank == 0 else None
    dist.scatter(piece, scatter_list=pieces, src=0)
    assert piece.tolist() == [10.0 * rank, 10.0 * rank + 1], piece

    # A sub-group of the even ranks.
    evens = [r for r in ranks if r % 2 == 0]
    group = dist.new_group(evens)
    if rank in evens:
        t = torch.ones(1)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        assert t.item() == len(evens), t
    print(f"rank {rank}: broadcast, reduce, all_reduce, gather, all_gather, scatter and a "
          f"sub-group of {len(evens)} are right")


if __name__ == "__main__":
    run(main)

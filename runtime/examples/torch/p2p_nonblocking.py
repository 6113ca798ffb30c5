"""Non-blocking point-to-point: isend/irecv around a ring, then receives
from any source (the sender's rank comes back)."""

import torch
import torch.distributed as dist

from common import run


def main(rank, size):
    right, left = (rank + 1) % size, (rank - 1) % size
    out = torch.arange(4, dtype=torch.float64) + 10 * rank
    got = torch.zeros(4, dtype=torch.float64)
    requests = [dist.irecv(tensor=got, src=left), dist.isend(tensor=out, dst=right)]
    for r in requests:
        r.wait()
    assert torch.equal(got, torch.arange(4, dtype=torch.float64) + 10 * left), (rank, got)
    print(f"rank {rank} got {got.tolist()} from rank {left}")

    # Rank 0 receives one message from every other rank, whichever comes first.
    if rank == 0:
        seen = set()
        for _ in range(size - 1):
            x = torch.zeros(1, dtype=torch.int64)
            sender = dist.recv(tensor=x)
            assert x.item() == 100 + sender, (sender, x)
            seen.add(sender)
        assert seen == set(range(1, size)), seen
        print(f"rank 0 heard from ranks {sorted(seen)}")
    else:
        dist.send(tensor=torch.tensor([100 + rank]), dst=0)


if __name__ == "__main__":
    run(main)

"""Blocking point-to-point: rank 0 sends a tensor to every other rank, each
sends it back incremented (torch's tutorial, with backend "collie")."""

import torch
import torch.distributed as dist

from common import run


def main(rank, size):
    tensor = torch.zeros(1)
    if rank == 0:
        for peer in range(1, size):
            tensor += 1
            dist.send(tensor=tensor, dst=peer)
            back = torch.zeros(1)
            dist.recv(tensor=back, src=peer)
            assert back.item() == tensor.item() + 1, (peer, back, tensor)
    else:
        dist.recv(tensor=tensor, src=0)
        assert tensor.item() == rank, (rank, tensor)
        dist.send(tensor=tensor + 1, dst=0)
    print(f"rank {rank} has data {tensor[0].item()}")


if __name__ == "__main__":
    run(main)

"""A 2 x 2 DeviceMesh on collie (4 ranks): rank r sits at row r // 2,
column r % 2; each dimension is a group of its own, made by the mesh. A
collective on each dimension sums, gathers and broadcasts along it, checked
against what the layout says."""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from common import run


def main(rank, size):
    assert size == 4, "the 2 x 2 mesh needs 4 ranks"
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("rows", "cols"))
    row, col = rank // 2, rank % 2
    assert mesh.get_coordinate() == [row, col], mesh.get_coordinate()
    along_rows = mesh.get_group("rows")  # the ranks of one column: col, col + 2
    along_cols = mesh.get_group("cols")  # the ranks of one row: 2 row, 2 row + 1
    assert dist.get_backend(along_rows) == "collie"

    t = torch.full((5,), float(rank))
    dist.all_reduce(t, group=along_rows)
    assert torch.equal(t, torch.full((5,), float(col + col + 2))), t
    t = torch.full((5,), float(rank))
    dist.all_reduce(t, group=along_cols)
    assert torch.equal(t, torch.full((5,), float(4 * row + 1))), t

    got = [torch.empty(3) for _ in range(2)]
    dist.all_gather(got, torch.full((3,), float(rank)), group=along_rows)
    assert [int(g[0]) for g in got] == [col, col + 2], got
    b = torch.full((2,), float(rank))
    dist.broadcast(b, src=2 * row + 1, group=along_cols)  # a global rank
    assert torch.equal(b, torch.full((2,), float(2 * row + 1))), b
    print(f"rank {rank}: mesh ({row}, {col}): sums, gathers and broadcasts on both dimensions")
    dist.barrier()


if __name__ == "__main__":
    run(main)

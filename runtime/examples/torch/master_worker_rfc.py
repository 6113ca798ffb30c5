"""The 2017 torch.distributed RFC's master-worker example, as written there,
with torch.distributed's name for the module changed to collie's:

    collie launch --master-worker -n 4 -- python3 master_worker_rfc.py

Rank 0 runs the program; ranks 1 to 3 are its nodes, where the tensors live
and the arithmetic runs. Only get() brings values back.
"""
import torch

import collie_torch.remote as dist  # the RFC's torch.distributed

dist.init_master_worker(backend="collie")  # the RFC: backend='mpi'

# The RFC's lines.
x = dist.FloatTensor(20, 20).fill_(4)
y = torch.randn(20, 20).dist_send()
z = x + y
with dist.node(1):
    a = dist.FloatTensor(10, device=1)

# What they made, checked against the same arithmetic run here.
y_local = y.get()
assert torch.equal(z.get(), 4 + y_local), "z = x + y"
print("x:", x, "z:", z, "a:", a)
print("z = x + y: right (z[0, :3] =", [round(v, 4) for v in z.get()[0, :3].tolist()], ")")

# More of the mode: tensors on other nodes, operations queued where their
# operands are, a copy between nodes, and a collective among the nodes.
with dist.node(2):
    w = dist.ones(20, 20) * 3
v = (z @ w).sum()  # w is copied from node 2 to node 1, where z is
want = float(((4 + y_local) @ torch.full((20, 20), 3.0)).sum())
assert abs(v.item() - want) <= 1e-4 * abs(want), "(z @ w).sum()"
parts = []
for n in range(1, dist.world_size()):
    with dist.node(n):
        parts.append(dist.full((4,), float(n)))
dist.all_reduce(parts)
total = sum(range(1, dist.world_size()))
assert all(p.tolist() == [total] * 4 for p in parts), "all_reduce among the nodes"
print("on %d nodes: matmul, sum and all_reduce right" % (dist.world_size() - 1))

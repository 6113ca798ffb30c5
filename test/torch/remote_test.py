"""collie_torch.remote (master-worker mode for torch), run as a job:

    collie launch --master-worker -n 3 -- python3 remote_test.py

Every dtype goes to a node and back intact at sizes 0, 1, around the
transport's eager limit and 8 MiB; operators, torch functions and methods
queued on the nodes give what the same operations give here; operands on
another node are copied there; an operation that raises on its node fails
what reads its result, naming the node and the first cause, and nothing
else. Exit 77 (skipped) where torch is not installed."""

import sys

try:
    import torch
except ImportError as e:
    print(f"SKIP: torch is not importable here ({e}); install python3-torch")
    sys.exit(77)

import collie_torch.remote as rd  # noqa: E402

rd.init_master_worker()


def check(ok, what):
    if not ok:
        raise AssertionError(what)


DTYPES = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]

nodes = list(range(1, rd.world_size()))
check(len(nodes) >= 2, "at least two nodes")

# ---- every dtype, there and back
for dtype in DTYPES:
    size = torch.tensor([], dtype=dtype).element_size()
    for n in (0, 1, 65536 // size - 1, 65536 // size + 1, (8 << 20) // size):
        if dtype == torch.bool:
            local = torch.arange(n) % 3 == 0
        elif dtype.is_floating_point:
            local = (torch.arange(n, dtype=torch.float64) * 0.37 - 11).to(dtype)
        else:
            local = (torch.arange(n) % 97 - (0 if dtype == torch.uint8 else 40)).to(dtype)
        remote = local.dist_send(nodes[n % len(nodes)])
        check(remote.shape == local.shape and remote.dtype == dtype, f"{dtype} x {n}: metadata")
        check(torch.equal(remote.get(), local), f"{dtype} x {n}: values")

# ---- operations queued on the nodes, against the same here
a_local = torch.randn(16, 8, dtype=torch.float64)
b_local = torch.randn(8, 4, dtype=torch.float64)
with rd.node(nodes[0]):
    a = a_local.dist_send()
with rd.node(nodes[1]):
    b = b_local.dist_send()
c = a @ b  # b is copied to a's node
check(c.node == nodes[0] and c.shape == (16, 4), "matmul where its first operand is")
check(torch.allclose(c.get(), a_local @ b_local), "matmul")
d = torch.relu(a) * 2 - 1
check(torch.allclose(d.get(), torch.relu(a_local) * 2 - 1), "relu, operators with scalars")
e = (a.exp() + a_local).sum(dim=1)  # a local operand is sent
check(torch.allclose(e.get(), (a_local.exp() + a_local).sum(dim=1)), "method, local operand")
check(abs(a.mean().item() - a_local.mean().item()) < 1e-12, "item")
f = rd.zeros(5, dtype=torch.int32)
f += 3
f.mul_(7)
check(f.tolist() == [21] * 5, "in place")
check(rd.tensor([1.5, 2.5]).tolist() == [1.5, 2.5], "tensor()")

# ---- a failure on a node poisons only what the operation wrote
ints = torch.arange(6).dist_send(nodes[0])
zero = torch.zeros(6, dtype=torch.int64).dist_send(nodes[0])
bad = ints // zero  # integer division by zero raises on the node, not on meta
other = ints + 1
try:
    bad.get()
    check(False, "division by zero did not fail")
except Exception as err:  # noqa: BLE001
    text = str(err)
    check("worker %d" % nodes[0] in text and "ZeroDivisionError" in text, "named: " + text)
try:
    (bad + 1).get()
    check(False, "a poisoned operand did not fail")
except Exception as err:  # noqa: BLE001
    check("poisoned" in str(err) and "ZeroDivisionError" in str(err), "first cause: " + str(err))
check(other.tolist() == [1, 2, 3, 4, 5, 6], "what the failure did not write is intact")

# ---- a collective among the nodes
parts = [torch.full((3,), float(n)).dist_send(n) for n in nodes]
rd.all_reduce(parts).wait()
check(all(p.tolist() == [float(sum(nodes))] * 3 for p in parts), "all_reduce")
# ---- many operations queued without waiting, and many sends, in order
acc = rd.zeros(4, dtype=torch.int64)
for i in range(2000):
    acc += torch.full((4,), i)  # a local operand: a send each time
rd.synchronize()
check(acc.tolist() == [sum(range(2000))] * 4, "2000 queued operations in order")
print("remote_test: all passed on %d nodes" % len(nodes))

"""The collie backend for torch.distributed, tested through torch's own API
with real processes (torch.multiprocessing), every value checked against a
reference computed in Python from the ranks' inputs.

    python3 torch_backend_test.py CASE[,CASE...] [WORLD]

Cases: tutorials (point-to-point and every collective, every dtype and
op), like_gloo (the coalesced forms and sparse all_reduce give gloo's
results on the same inputs), ddp (DistributedDataParallel reaches gloo's weights), killed (a rank
SIGKILLed mid all_reduce is named on the others), mismatch (MismatchError
naming both calls), errors (what collie cannot take is named), cuda
(every collective and send/recv on CUDA tensors, on torch's current
stream), reinit_tcp (destroy and init again at once on rank 0's tcp://
store). Several cases run one after another in the same processes, which
import torch once (killed alone: it ends a rank;
mismatch last: it ends its processes). Exit 77 (skipped) where
Debian's python3-torch is not installed, and for cuda where torch sees no
GPU."""

import datetime
import os
import signal
import sys
import tempfile
import time
import traceback

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:  # python3-torch is missing: skip, saying why
    print(f"SKIP: torch is not importable here ({e}); install python3-torch")
    sys.exit(77)

import collie_torch  # noqa: E402

TIMEOUT = datetime.timedelta(seconds=60)


def init(backend, rank, size, path, timeout=TIMEOUT):
    dist.init_process_group(backend, init_method="file://" + path, rank=rank,
                            world_size=size, timeout=timeout)


def check(ok, what):
    if not ok:
        raise AssertionError(what)


# ---- the tutorials, every dtype and op --------------------------------------

DTYPES = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64]


def value(rank, i, dtype):
    """Rank `rank`'s element i: small, so sums and products are exact."""
    if dtype == torch.bool:
        return (rank + i) % 3 == 0
    if dtype == torch.uint8:
        return (rank * 3 + i) % 5 + 1
    return ((rank * 7 + i * 3) % 5) - (0 if dtype in (torch.uint8,) else 2)


def tensor_of(rank, n, dtype):
    return torch.tensor([value(rank, i, dtype) for i in range(n)], dtype=dtype)


def reference(op, size, n, dtype):
    """op over every rank's tensor, element by element, in Python's numbers."""
    out = []
    for i in range(n):
        xs = [value(r, i, dtype) for r in range(size)]
        if dtype == torch.bool:
            xs = [bool(x) for x in xs]
            if op in ("sum", "max", "bor"):
                out.append(any(xs))
            elif op in ("product", "min", "band"):
                out.append(all(xs))
            else:  # bxor
                acc = False
                for x in xs:
                    acc ^= x
                out.append(acc)
            continue
        if op == "sum":
            out.append(sum(xs))
        elif op == "product":
            acc = 1
            for x in xs:
                acc *= x
            out.append(acc)
        elif op == "min":
            out.append(min(xs))
        elif op == "max":
            out.append(max(xs))
        elif op == "band":
            acc = -1
            for x in xs:
                acc &= x
            out.append(acc)
        elif op == "bor":
            acc = 0
            for x in xs:
                acc |= x
            out.append(acc)
        elif op == "bxor":
            acc = 0
            for x in xs:
                acc ^= x
            out.append(acc)
        elif op == "avg":
            out.append(sum(xs) / size)
    return torch.tensor(out, dtype=torch.float64 if op == "avg" else None).to(dtype)


OPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR,
       "bxor": dist.ReduceOp.BXOR, "avg": dist.ReduceOp.AVG}


def ops_for(dtype):
    if dtype == torch.bool:
        return ["sum", "product", "min", "max", "band", "bor", "bxor"]
    if dtype.is_floating_point:
        return ["sum", "product", "min", "max", "avg"]
    return list(OPS)


def tutorials(rank, size, path):
    init("collie", rank, size, path)
    world = list(range(size))
    # Blocking send/recv: a ring, then every rank to rank 0 from any source.
    out = torch.arange(5, dtype=torch.float32) + 100 * rank
    got = torch.zeros(5)
    right, left = (rank + 1) % size, (rank - 1) % size
    if size > 1:
        if rank % 2 == 0:
            dist.send(out, right)
            dist.recv(got, left)
        else:
            dist.recv(got, left)
            dist.send(out, right)
        check(torch.equal(got, torch.arange(5, dtype=torch.float32) + 100 * left), f"ring {got}")
    # Non-blocking, with tags, both directions at once.
    a, b = torch.zeros(3, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)
    reqs = [dist.irecv(a, left, tag=1), dist.irecv(b, right, tag=2),
            dist.isend(torch.tensor([rank, 1, 2]), right, tag=1),
            dist.isend(torch.tensor([rank, 3, 4]), left, tag=2)]
    for r in reqs:
        r.wait()
    check(a.tolist() == [left, 1, 2] and b.tolist() == [right, 3, 4], f"isend/irecv {a} {b}")
    if rank == 0:
        seen = {}
        for _ in range(size - 1):
            x = torch.zeros(2, dtype=torch.int32)
            src = dist.recv(x)
            seen[src] = x.tolist()
        check(seen == {r: [r, -r] for r in world[1:]}, f"recv from any source: {seen}")
    else:
        dist.send(torch.tensor([rank, -rank], dtype=torch.int32), 0)

    for dtype in DTYPES:
        for n in (0, 1, size - 1 if size > 1 else 2, 37):
            what = f"{dtype} n={n}"
            for op in ops_for(dtype):
                t = tensor_of(rank, n, dtype)
                dist.all_reduce(t, op=OPS[op])
                ref = reference(op, size, n, dtype)
                check(torch.equal(t, ref), f"all_reduce {op} {what}: {t} != {ref}")
            for root in world:
                t = tensor_of(rank, n, dtype)
                dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
                if rank == root:
                    ref = reference("max", size, n, dtype)
                    check(torch.equal(t, ref), f"reduce to {root} {what}: {t}")
                else:
                    check(torch.equal(t, tensor_of(rank, n, dtype)), f"reduce left input {what}")
                t = tensor_of(rank, n, dtype)
                dist.broadcast(t, src=root)
                check(torch.equal(t, tensor_of(root, n, dtype)), f"broadcast {root} {what}")
                mine = tensor_of(rank, n, dtype)
                bucket = [torch.zeros(n, dtype=dtype) for _ in world] if rank == root else None
                dist.gather(mine, gather_list=bucket, dst=root)
                if rank == root:
                    check(all(torch.equal(bucket[r], tensor_of(r, n, dtype)) for r in world),
                          f"gather {root} {what}")
                piece = torch.zeros(n, dtype=dtype)
                pieces = [tensor_of(r + 10, n, dtype) for r in world] if rank == root else None
                dist.scatter(piece, scatter_list=pieces, src=root)
                check(torch.equal(piece, tensor_of(rank + 10, n, dtype)), f"scatter {root} {what}")
            everyone = [torch.zeros(n, dtype=dtype) for _ in world]
            dist.all_gather(everyone, tensor_of(rank, n, dtype))
            check(all(torch.equal(everyone[r], tensor_of(r, n, dtype)) for r in world),
                  f"all_gather {what}")
            flat = torch.zeros(n * size, dtype=dtype)
            dist._all_gather_base(flat, tensor_of(rank, n, dtype))
            check(torch.equal(flat, torch.cat([tensor_of(r, n, dtype) for r in world])),
                  f"_all_gather_base {what}")
            if dtype != torch.bool:
                out = torch.zeros(n, dtype=dtype)
                dist.reduce_scatter(out, [tensor_of(rank + 5 * j, n, dtype) for j in world])
                ref = torch.zeros(n, dtype=dtype)
                for r in world:
                    ref += tensor_of(r + 5 * rank, n, dtype)
                check(torch.equal(out, ref), f"reduce_scatter {what}: {out} != {ref}")
            ins = [tensor_of(rank * size + j, n, dtype) for j in world]
            outs = [torch.zeros(n, dtype=dtype) for _ in world]
            dist.all_to_all(outs, ins)
            check(all(torch.equal(outs[j], tensor_of(j * size + rank, n, dtype)) for j in world),
                  f"all_to_all {what}")
    # all_to_all_single with uneven splits: rank i sends (i + j) % 3 rows to j.
    split = lambda i, j: (i + j) % 3  # noqa: E731
    inp = torch.cat([torch.full((split(rank, j), 2), 10.0 * rank + j) for j in world])
    out = torch.zeros(sum(split(j, rank) for j in world), 2)
    dist.all_to_all_single(out, inp, output_split_sizes=[split(j, rank) for j in world],
                           input_split_sizes=[split(rank, j) for j in world])
    ref = torch.cat([torch.full((split(j, rank), 2), 10.0 * j + rank) for j in world])
    check(torch.equal(out, ref), f"all_to_all_single with splits: {out} != {ref}")
    # Async: a Work to wait on, and a future.
    t = torch.ones(1000, dtype=torch.float64) * (rank + 1)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    work.wait()
    check(fut.wait()[0] is not None and t[0].item() == size * (size + 1) / 2, f"async {t[0]}")
    check(work.is_completed() and work.is_success(), "work done")
    # A future asked for after the call completed is complete, with the result.
    t = torch.ones(3, dtype=torch.int32) * (rank + 1)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    fut = work.get_future()
    check(fut.done() and torch.equal(fut.wait()[0], torch.full((3,), size * (size + 1) // 2,
                                                               dtype=torch.int32)),
          f"future after the call: {fut.done()} {t}")
    # Sub-groups, nested numbering.
    odd = [r for r in world if r % 2 == 1]
    # (torch takes new_group([]) for the whole world: only with members.)
    group = dist.new_group(odd) if odd else None
    if rank in odd:
        t = torch.tensor([rank])
        dist.all_reduce(t, group=group)
        check(t.item() == sum(odd), f"sub-group all_reduce {t}")
        if len(odd) > 1:
            t = torch.zeros(1, dtype=torch.int64)
            if rank == odd[-1]:
                dist.send(torch.tensor([7]), odd[0], group=group)
            elif rank == odd[0]:
                src = dist.recv(t, group=group)
                check(src == odd[-1] and t.item() == 7, f"sub-group recv any: {src} {t}")
    dist.barrier()
    dist.destroy_process_group()
    # A group again in the same process, on a new store.
    init("collie", rank, size, path + ".again")
    t = torch.ones(2)
    dist.all_reduce(t)
    check(t.tolist() == [size, size], f"after re-init: {t}")
    dist.destroy_process_group()


# ---- DDP reaches gloo's weights ----------------------------------------------

def ddp(rank, size, path):
    from torch.nn.parallel import DistributedDataParallel as DDP
    weights = {}
    for backend in ("gloo", "collie"):
        init(backend, rank, size, path + backend)
        torch.manual_seed(0)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(),
                                        torch.nn.Linear(12, 3)).double())
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(rank)
        for _ in range(8):
            x = torch.randn(16, 6, generator=g, dtype=torch.float64)
            loss = model(x).pow(2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        weights[backend] = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        dist.destroy_process_group()
    diff = (weights["gloo"] - weights["collie"]).abs().max().item()
    # Sums in another order differ in the last bits only.
    check(diff < 1e-12, f"DDP on collie and on gloo differ by {diff}")


# ---- what gloo has beside the plain collectives, against gloo ---------------------

def like_gloo(rank, size, path):
    """The coalesced forms and sparse all_reduce on collie's world and on a
    gloo group of the same ranks, on the same inputs: the same results."""
    import warnings
    warnings.filterwarnings("ignore", message=".*coalesced will be deprecated")
    init("collie", rank, size, path)
    gloo = dist.new_group(list(range(size)), backend="gloo")
    world = list(range(size))

    def both(run):
        """run(group) on collie's group and on gloo's; their results."""
        return run(None), run(gloo)

    # all_gather_coalesced: a list of tensors of several shapes (one empty).
    def gather_lists(group):
        ins = [torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * rank,
               torch.full((4,), float(rank)), torch.zeros(0), torch.tensor([rank * 1.5])]
        outs = [[torch.zeros_like(t) for t in ins] for _ in world]
        dist.all_gather_coalesced(outs, ins, group=group)
        return outs
    got, want = both(gather_lists)
    for r in world:
        for j, (g, w) in enumerate(zip(got[r], want[r])):
            check(torch.equal(g, w), f"all_gather_coalesced rank {r} tensor {j}: {g} != {w}")
    check(torch.equal(got[size - 1][1], torch.full((4,), float(size - 1))),
          "all_gather_coalesced: the last rank's tensor")

    # Sparse COO tensors summed: overlapping indices, a hybrid one (a dense
    # row per index), and a rank with no entries at all.
    def sparse_sums(group):
        i = torch.tensor([[0, rank, 3], [1, 2, rank % 2]])
        v = torch.tensor([1.0, 2.0 * rank, 0.5])
        a = torch.sparse_coo_tensor(i, v, (4, 3))
        if rank == 1:
            b = torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.long), torch.zeros(0, 2),
                                        (5, 2))
        else:
            b = torch.sparse_coo_tensor(torch.tensor([[rank % 5, 4]]),
                                        torch.tensor([[rank, 1.0], [2.0, -rank]]), (5, 2))
        dist.all_reduce(a, group=group)
        dist.all_reduce(b, group=group)
        return a.to_dense(), b.to_dense()
    got, want = both(sparse_sums)
    check(torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]),
          f"sparse all_reduce: {got} != {want}")
    dense = torch.zeros(4, 3)
    for r in world:
        for (x, y), val in zip([(0, 1), (r, 2), (3, r % 2)], [1.0, 2.0 * r, 0.5]):
            dense[x, y] += val
    check(torch.equal(got[0], dense), f"sparse all_reduce: {got[0]} != {dense}")
    try:
        dist.all_reduce(torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (2,)),
                        op=dist.ReduceOp.MAX)
        raise AssertionError("a sparse max went through")
    except RuntimeError as e:
        check("summed only" in str(e), str(e))

    # all_reduce_coalesced, every op gloo takes there.
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX):
        def reduce_lists(group, op=op):
            ts = [torch.arange(5, dtype=torch.float32) + rank, torch.tensor([[rank + 2.0]])]
            dist.all_reduce_coalesced(ts, op=op, group=group)
            return ts
        got, want = both(reduce_lists)
        check(all(torch.equal(g, w) for g, w in zip(got, want)),
              f"all_reduce_coalesced {op}: {got} != {want}")
    dist.destroy_process_group()


# ---- failures -------------------------------------------------------------------

def killed(rank, size, path):
    init("collie", rank, size, path, timeout=datetime.timedelta(seconds=120))
    t = torch.ones(1 << 16)
    dist.all_reduce(t)
    if rank == size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    began = time.monotonic()
    try:
        for _ in range(1000):
            dist.all_reduce(t)
    except RuntimeError as e:
        waited = time.monotonic() - began
        message = str(e)
        check(f"rank {size - 1}" in message, f"the error does not name rank {size - 1}: {message}")
        check(waited < 30, f"the error took {waited:.1f} s")
        print(f"rank {rank}: {message.splitlines()[0]}")
        os._exit(0)
    raise AssertionError("all_reduce went on without the killed rank")


def mismatch(rank, size, path):
    init("collie", rank, size, path, timeout=datetime.timedelta(seconds=30))
    t = torch.ones(4)
    try:
        if rank == 0:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=0)
        raise AssertionError("a mismatch went unnoticed")
    except RuntimeError as e:
        message = str(e)
        check("called all_reduce(float32, 4, sum)" in message and "broadcast(float32, 4, root=0)"
              in message, f"not a mismatch naming both calls: {message}")
    os._exit(0)


def errors(rank, size, path):
    init("collie", rank, size, path)
    expected = [
        (lambda: dist.all_reduce(torch.ones(4, 4).t()), "not contiguous"),
        (lambda: dist.broadcast(torch.ones(2, dtype=torch.complex64), 0),
         "is not one collie carries"),
        (lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND), "band"),
        (lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool), op=dist.ReduceOp.AVG), "avg"),
        (lambda: dist.broadcast(torch.ones(2), src=size), "rank"),
        (lambda: dist.all_gather_into_tensor(torch.zeros(2 * size, dtype=torch.float64),
                                             torch.ones(2)), "must be the same"),
        # The flat forms' sizes, as collie's own calls check them.
        (lambda: dist.all_gather_into_tensor(torch.zeros(2 * size + 1), torch.ones(2)),
         f"_allgather_base: rank {rank}: all_gather: a buffer of {2 * size + 1} elements for "
         f"{size} ranks of 2: it must hold {size} x 2 = {2 * size}"),
        (lambda: dist._reduce_scatter_base(torch.zeros(2), torch.ones(2 * size + 1)),
         f"a buffer of {2 * size + 1} elements for {size} ranks of 2"),
        (lambda: dist.all_to_all_single(torch.zeros(size + 1), torch.ones(size + 1)),
         f"both must hold {size} equal blocks"),
        # The root's lists are collie's to check; torch refuses lists elsewhere.
        (lambda: dist.gather(torch.ones(2), gather_list=[torch.zeros(2)] * (size + 1), dst=0),
         f"the root needs one list of {size} output tensors" if rank == 0 else "gather_list"),
        (lambda: dist.scatter(torch.zeros(2), scatter_list=[torch.ones(3)] * size, src=0),
         "every input must have the output's size" if rank == 0 else "scatter_list"),
    ]
    for call, words in expected:
        try:
            call()
            raise AssertionError(f"no error; expected one mentioning '{words}'")
        except (RuntimeError, ValueError) as e:
            check(words in str(e), f"'{words}' not in: {e}")
        # (A refused call leaves the group usable: check it still works.)
        t = torch.ones(1)
        dist.all_reduce(t)
        check(t.item() == size, "the group after a refused call")
    # A sub-group's errors name it, and give each rank's global number
    # beside its number in the group: global rank 2 is the group's rank 1.
    if size >= 3:
        sub = dist.new_group([0, 2], timeout=datetime.timedelta(seconds=2))
        if rank == 0:
            try:
                dist.barrier(group=sub)
                raise AssertionError("a barrier without its other rank went through")
            except RuntimeError as e:
                check("on the torch group of global ranks 0, 2" in str(e)
                      and "rank 1 (global rank 2)" in str(e) and " timeout " in str(e), str(e))
        dist.barrier()
    dist.destroy_process_group()


def monitored(rank, size, path):
    # torch 1.13's own works with gloo alone; collie_torch's names who is
    # missing, and with collie_torch imported torch's own function runs it
    # for a collie group (and torch's for a gloo one).
    import collie_torch
    init("collie", rank, size, path)
    collie_torch.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    gloo = dist.new_group(list(range(size)), backend="gloo")
    dist.monitored_barrier(group=gloo, timeout=datetime.timedelta(seconds=30))
    short = datetime.timedelta(seconds=2)
    # The last rank does not come: every rank hears it named.
    if rank != size - 1:
        try:
            collie_torch.monitored_barrier(timeout=short, wait_all_ranks=True)
            raise AssertionError("a rank that never came went unnoticed")
        except RuntimeError as e:
            check(f"Rank {size - 1} failed to pass monitoredBarrier in 2000 ms" in str(e), str(e))
    # Two missing (the first two after rank 0): all named with wait_all_ranks,
    # the first alone without.
    for wait_all in (True, False):
        if rank in (1, 2):
            continue
        try:
            dist.monitored_barrier(timeout=short, wait_all_ranks=wait_all)
            raise AssertionError("missing ranks went unnoticed")
        except RuntimeError as e:
            if rank == 0:
                want = "Ranks 1, 2 failed" if wait_all else "Rank 1 failed"
                check(want in str(e), str(e))
    # The store is this group's: its keys do not disturb a later barrier.
    t = torch.ones(1)
    dist.all_reduce(t)
    check(t.item() == size, "the group after the barriers")
    dist.destroy_process_group()


# ---- init again by hand, on rank 0's TCPStore ------------------------------------

def reinit_tcp(rank, size, path):
    """mp.spawn's pattern: init_method tcp:// (rank 0's process serves torch's
    store), destroy, init again at once on the same port, three times; no
    destroy waits out its limit for the old store to close. Rank 0's process,
    which holds a connection from every other rank for torch's store and one
    more for its close watch, raises its soft limit on open files to the
    hard one."""
    import resource
    port_file = path + ".port"
    hold = None
    if rank == 0:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        # The port stays bound (not listening) for the whole case, so that
        # no other process's bind to port 0 gets it between this probe and
        # torch's store; the store binds it beside this socket, as both set
        # SO_REUSEADDR.
        import socket
        hold = socket.socket()
        hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hold.bind(("127.0.0.1", 0))
        port = hold.getsockname()[1]
        with open(port_file + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(port_file + ".tmp", port_file)
    deadline = time.monotonic() + 60
    while not os.path.exists(port_file):
        check(time.monotonic() < deadline, "rank 0 never wrote its port")
        time.sleep(0.01)
    with open(port_file) as f:
        port = int(f.read())
    for again in range(3):
        dist.init_process_group("collie", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size, timeout=TIMEOUT)
        if rank == 0:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            check(soft == hard, f"rank 0's soft limit on open files is {soft}, its hard {hard}")
        t = torch.full((100,), float(rank + 1 + again))
        dist.all_reduce(t)
        want = size * (size + 1) / 2 + size * again
        check(t.eq(want).all(), f"group {again}: {t[:4]} != {want}")
        began = time.monotonic()
        dist.destroy_process_group()
        # A rank other than 0 waits there for rank 0's old store to close:
        # the store made again on its port ends the wait, not its 10 s limit.
        took = time.monotonic() - began
        check(took < 5, f"destroy {again} waited {took:.1f} s for rank 0's store")
    if hold is not None:
        hold.close()


# ---- CUDA tensors -------------------------------------------------------------

def cuda(rank, size, path):
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    init("collie", rank, size, path)
    world = list(range(size))

    def on(t):
        return t.to(dev)

    def same(t, ref):
        return t.device == dev and torch.equal(t.cpu(), ref)

    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        for n in (0, 1, size - 1 if size > 1 else 2, 37):
            what = f"cuda {dtype} n={n}"
            for op in ops_for(dtype):
                t = on(tensor_of(rank, n, dtype))
                dist.all_reduce(t, op=OPS[op])
                ref = reference(op, size, n, dtype)
                check(same(t, ref), f"all_reduce {op} {what}: {t} != {ref}")
            root = n % size
            t = on(tensor_of(rank, n, dtype))
            dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
            if rank == root:
                check(same(t, reference("max", size, n, dtype)), f"reduce {what}")
            t = on(tensor_of(rank, n, dtype))
            dist.broadcast(t, src=root)
            check(same(t, tensor_of(root, n, dtype)), f"broadcast {what}")
            bucket = [on(torch.zeros(n, dtype=dtype)) for _ in world] if rank == root else None
            dist.gather(on(tensor_of(rank, n, dtype)), gather_list=bucket, dst=root)
            if rank == root:
                check(all(same(bucket[r], tensor_of(r, n, dtype)) for r in world),
                      f"gather {what}")
            piece = on(torch.zeros(n, dtype=dtype))
            pieces = [on(tensor_of(r + 10, n, dtype)) for r in world] if rank == root else None
            dist.scatter(piece, scatter_list=pieces, src=root)
            check(same(piece, tensor_of(rank + 10, n, dtype)), f"scatter {what}")
            everyone = [on(torch.zeros(n, dtype=dtype)) for _ in world]
            dist.all_gather(everyone, on(tensor_of(rank, n, dtype)))
            check(all(same(everyone[r], tensor_of(r, n, dtype)) for r in world),
                  f"all_gather {what}")
            flat = on(torch.zeros(n * size, dtype=dtype))
            dist.all_gather_into_tensor(flat, on(tensor_of(rank, n, dtype)))
            check(same(flat, torch.cat([tensor_of(r, n, dtype) for r in world])),
                  f"all_gather_into_tensor {what}")
            if dtype != torch.bool:
                out = on(torch.zeros(n, dtype=dtype))
                dist.reduce_scatter(out, [on(tensor_of(rank + 5 * j, n, dtype)) for j in world])
                ref = torch.zeros(n, dtype=dtype)
                for r in world:
                    ref += tensor_of(r + 5 * rank, n, dtype)
                check(same(out, ref), f"reduce_scatter {what}")
            outs = [on(torch.zeros(n, dtype=dtype)) for _ in world]
            dist.all_to_all(outs, [on(tensor_of(rank * size + j, n, dtype)) for j in world])
            check(all(same(outs[j], tensor_of(j * size + rank, n, dtype)) for j in world),
                  f"all_to_all {what}")
    # Large tensors: staged in segments through pinned memory (above 4 MiB).
    n = (3 << 20) + 5
    big = on(torch.arange(n, dtype=torch.float64) % 7 + rank)
    dist.all_reduce(big)
    ref = (torch.arange(n, dtype=torch.float64) % 7) * size + sum(world)
    check(same(big, ref), "all_reduce of 24 MiB")
    flat = on(torch.zeros(n * size, dtype=torch.float32))
    dist.all_gather_into_tensor(flat, on(torch.full((n,), float(rank))))
    check(same(flat, torch.cat([torch.full((n,), float(r)) for r in world])),
          "all_gather_into_tensor of 12 MiB each")
    # The caller's stream: the tensor is written on a side stream behind a
    # long kernel; collie's copies must follow that stream, not the default.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t = torch.empty(1 << 22, device=dev)
        torch.cuda._sleep(100_000_000)
        t.fill_(rank + 1.0)
        dist.all_reduce(t)
        got = t.cpu()
    check(torch.equal(got, torch.full((1 << 22,), float(sum(r + 1 for r in world)))),
          f"all_reduce on a side stream: {got[:4]}")
    with torch.cuda.stream(side):
        t = torch.empty(1000, device=dev)
        torch.cuda._sleep(100_000_000)
        t.fill_(rank + 1.0)
        work = dist.all_reduce(t, async_op=True)
    work.wait()
    check(torch.equal(t.cpu(), torch.full((1000,), float(size * (size + 1) / 2))),
          "async all_reduce on a side stream")
    # Send and receive: a ring, the send written on a side stream.
    if size > 1:
        right, left = (rank + 1) % size, (rank - 1) % size
        got = on(torch.zeros(5))
        with torch.cuda.stream(side):
            out = torch.empty(5, device=dev)
            torch.cuda._sleep(50_000_000)
            out.copy_(torch.arange(5, dtype=torch.float32) + 100 * rank)
            reqs = [dist.isend(out, right), dist.irecv(got, left)]
        for r in reqs:
            r.wait()
        check(same(got, torch.arange(5, dtype=torch.float32) + 100 * left), f"ring {got}")
    dist.barrier()
    dist.destroy_process_group()


# ---- torch 2's calls that torch 1.13 lacks ----------------------------------

def torch2(rank, size, path):
    """PREMUL_SUM (each rank's input times a factor, then summed), the
    coalesced tensor calls (what FSDP2 and the functional collectives
    send), and the backend's name where torch 2 asks for it: each result
    against what the inputs say."""
    if int(torch.__version__.split(".")[0]) < 2:
        return  # these calls are torch 2's
    init("collie", rank, size, path)
    ranks = range(size)
    t = torch.arange(6, dtype=torch.float64) + rank
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    want = sum(0.5 * (torch.arange(6, dtype=torch.float64) + r) for r in ranks)
    check(torch.equal(t, want), f"PREMUL_SUM all_reduce: {t} against {want}")

    whole = torch.arange(2 * size, dtype=torch.float32) * (rank + 1)
    kept = whole.clone()
    part = torch.empty(2)
    dist.reduce_scatter_tensor(part, whole, op=dist._make_nccl_premul_sum(2.0))
    want = sum(2.0 * torch.arange(2 * size, dtype=torch.float32) * (r + 1) for r in ranks)
    check(torch.equal(part, want[2 * rank:2 * rank + 2]), f"PREMUL_SUM reduce_scatter: {part}")
    check(torch.equal(whole, kept), "PREMUL_SUM reduce_scatter changed its input")

    ins = [torch.full((3,), float(rank)), torch.full((2,), 10.0 * rank)]
    outs = [torch.empty(3 * size), torch.empty(2 * size)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for out, inp in zip(outs, ins):
            dist.all_gather_into_tensor(out, inp)
    cm.wait()
    check(torch.equal(outs[0], torch.cat([torch.full((3,), float(r)) for r in ranks])) and
          torch.equal(outs[1], torch.cat([torch.full((2,), 10.0 * r) for r in ranks])),
          f"allgather_into_tensor_coalesced: {outs}")

    ins = [torch.arange(size, dtype=torch.int64) + rank, torch.ones(2 * size) * rank]
    outs = [torch.empty(1, dtype=torch.int64), torch.empty(2)]
    with dist._coalescing_manager(async_ops=True) as cm:
        for out, inp in zip(outs, ins):
            dist.reduce_scatter_tensor(out, inp)
    cm.wait()
    check(outs[0].item() == sum(rank + r for r in ranks) and
          torch.equal(outs[1], torch.full((2,), float(sum(ranks)))),
          f"reduce_scatter_tensor_coalesced: {outs}")

    check(dist.get_backend() == "collie", dist.get_backend())
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(torch.nn.Linear(3, 2))
    model(torch.ones(1, 3)).sum().backward()
    name = model._get_ddp_logging_data().get("backend_name")
    check(name == "collie", f"DDP's logging names the backend {name!r}")
    dist.destroy_process_group()


# Cases that end their processes (a group they broke is not destroyed).
ENDS_PROCESS = ("mismatch", "killed")

CASES = {"tutorials": tutorials, "like_gloo": like_gloo, "ddp": ddp, "killed": killed, "mismatch": mismatch,
         "errors": errors, "monitored": monitored, "cuda": cuda, "reinit_tcp": reinit_tcp,
         "torch2": torch2}


def _entry(rank, size, directory, cases):
    # Each case in turn, in the same processes (each imports torch once):
    # every case makes its group and destroys it, on a store of its own.
    for i, case in enumerate(cases):
        try:
            CASES[case](rank, size, os.path.join(directory, f"store-{i}"))
        except Exception:
            print(f"rank {rank}: case {case} failed:", file=sys.stderr)
            traceback.print_exc()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)


if __name__ == "__main__":
    cases = sys.argv[1].split(",")
    size = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    case = ",".join(cases)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"no case {', '.join(unknown)}; cases: {', '.join(CASES)}")
        sys.exit(2)
    if "killed" in cases and cases != ["killed"]:
        print("killed ends a rank: run it alone")
        sys.exit(2)
    if any(c in ENDS_PROCESS for c in cases[:-1]):
        print(f"{', '.join(ENDS_PROCESS)} end their processes: only last")
        sys.exit(2)
    if "cuda" in cases and not torch.cuda.is_available():
        print(f"SKIP: torch {torch.__version__} sees no CUDA device here")
        sys.exit(77)
    spawn = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as d:
        ranks = [spawn.Process(target=_entry, args=(r, size, d, cases)) for r in range(size)]
        for p in ranks:
            p.start()
        # Every rank ends by itself (each has its timeouts); a hung one is
        # killed after 10 minutes and fails the test.
        deadline = time.monotonic() + 600
        for p in ranks:
            p.join(max(1.0, deadline - time.monotonic()))
        codes = []
        for p in ranks:
            if p.is_alive():
                p.kill()
                p.join()
                codes.append("hung")
            else:
                codes.append(p.exitcode)
    # The killed case: the last rank ends by SIGKILL, the others well.
    want = [0] * size
    if case == "killed":
        want[-1] = -signal.SIGKILL
    ok = codes == want
    print(f"{case} on {size} processes: {'passed' if ok else 'FAILED'} (exit codes {codes})")
    sys.exit(0 if ok else 1)

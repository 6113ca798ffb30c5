#!/usr/bin/python3
"""The same sweep as `collie bench`, through torch.distributed: its gloo
backend, or (--backend collie) collie's (runtime/torch; put
build/release/python on PYTHONPATH).

  python3 tools/peers/torch_gloo_bench.py --ranks 2 --collective all_reduce \
      -b 8 -e 64M -f 4 -n 20 -w 5 [--backend collie] [--device cuda] > torch.csv

With --env it is one rank of a job started by hand (on the hosts of
tools/cluster.sh, say): RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT from
the environment (rank 0 hosts torch's store), GLOO_SOCKET_IFNAME or
COLLIE_SOCKET_IFNAME for the interface; rank 0 prints the CSV.

Prints CSV (collective, size_bytes, time_us, busbw_gbps, label,
rank0_median_us) with the columns `collie bench --baseline` reads. time_us:
the mean over iterations, maximum across ranks; rank0_median_us: the median
of rank 0's calls, each timed by itself (as MPI benchmarks time them); bus
factors as nccl-tests (and collie bench). float32, sum, in place where torch
has one buffer. --device cuda: tensors on the GPU (rank r on cuda:r modulo
the GPUs), the device synchronised after each call. Used for docs/PERFORMANCE.md; not part of the build.
"""
import argparse, os, queue as queues, socket, statistics, sys, time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def factor(name, n):
    return {"all_reduce": 2 * (n - 1) / n, "broadcast": 1, "reduce": 1}.get(name, (n - 1) / n)


def run(rank, args, port, queue):
    if port is not None:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    # env:// asks for libuv's TCPStore unless told otherwise, and Debian 13's
    # torch 2.6 has none; the store only meets the ranks, for both backends.
    os.environ.setdefault("USE_LIBUV", "0")
    if args.backend == "collie":
        import collie_torch  # noqa: F401  (registers "collie")
    dev = torch.device("cpu")
    if args.device == "cuda":
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    dist.init_process_group(args.backend, rank=rank, world_size=args.ranks)
    n = args.ranks
    size = args.b
    rows = []
    c = args.collective
    blocked = c in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
    while size <= args.e:
        count = size // 4 // (n if blocked else 1)
        if count == 0:
            size *= args.f
            continue
        x = torch.ones(count, dtype=torch.float32, device=dev)
        # Only the buffers the collective uses: at 64 MiB on 8 ranks the
        # others were 8 GiB of the machine's memory.
        full = [torch.ones(count, device=dev) for _ in range(n)] if blocked and c != "all_to_all" else None
        big = torch.ones(count * n, device=dev) if c == "all_to_all" else None

        def sync():
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)

        def once():
            if c == "all_reduce":
                dist.all_reduce(x)
            elif c == "broadcast":
                dist.broadcast(x, 0)
            elif c == "reduce":
                dist.reduce(x, 0)
            elif c == "all_gather":
                dist.all_gather(full, x)
            elif c == "gather":
                dist.gather(x, full if rank == 0 else None, 0)
            elif c == "scatter":
                dist.scatter(x, full if rank == 0 else None, 0)
            elif c == "reduce_scatter":
                dist.reduce_scatter(x, full)
            elif c == "all_to_all":
                out = torch.empty_like(big)
                dist.all_to_all_single(out, big)

        for _ in range(args.w):
            once()
        sync()
        dist.barrier()
        # Each call timed by itself too (rank 0's median, as MPI
        # benchmarks time them); the mean of all, the slowest rank's.
        each = []
        start = time.perf_counter()
        for _ in range(args.n):
            began = time.perf_counter()
            once()
            sync()
            each.append(time.perf_counter() - began)
        mine = torch.tensor([(time.perf_counter() - start) / args.n * 1e6])
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)
        t = mine.item()
        nbytes = count * 4 * (n if blocked else 1)
        rows.append((nbytes, t, nbytes / t / 1e3 * factor(args.collective, n),
                     statistics.median(each) * 1e6))
        size *= args.f
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--collective", default="all_reduce")
    p.add_argument("-b", type=parse_size, default=8)
    p.add_argument("-e", type=parse_size, default=64 << 20)
    p.add_argument("-f", type=int, default=2)
    p.add_argument("-n", type=int, default=20)
    p.add_argument("-w", type=int, default=5)
    p.add_argument("--backend", default="gloo", choices=["gloo", "collie"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--env", action="store_true",
                   help="one rank of a job started by hand (RANK, WORLD_SIZE, MASTER_*)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.env:
        args.ranks = int(os.environ["WORLD_SIZE"])
        rank = int(os.environ["RANK"])
        rows = []

        class Keep:  # rank 0's rows
            def put(self, r):
                rows.extend(r)

        run(rank, args, None, Keep())
        if rank == 0:
            print_rows(args, rows)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, args, port, queue)) for r in range(args.ranks)]
    for proc in procs:
        proc.start()
    rows = None
    while rows is None:  # rank 0's rows, unless a rank fails first
        try:
            rows = queue.get(timeout=1)
        except queues.Empty:
            failed = [(r, p.exitcode) for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
            if failed:  # the others may wait for it in a collective forever
                for proc in procs:
                    proc.terminate()
                    proc.join()
                rank, code = failed[0]
                sys.exit(f"torch_gloo_bench: rank {rank} of {args.ranks} exited with {code} in the "
                         f"{args.collective} benchmark on backend {args.backend} (its error is above); "
                         "the other ranks were stopped")
    for proc in procs:
        proc.join()
    print_rows(args, rows)


def print_rows(args, rows):
    print("collective,size_bytes,time_us,busbw_gbps,label,rank0_median_us")
    for nbytes, t, bw, median in rows:
        label = f"torch-{args.backend}" + ("-cuda" if args.device == "cuda" else "")
        print(f"{args.collective},{nbytes},{t:.2f},{bw:.4f},{label},{median:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

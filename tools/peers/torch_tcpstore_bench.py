#!/usr/bin/env python3
"""PyTorch TCPStore under the same load as `collie bench store`, for comparison.

Needs Debian's python3-torch (run it with /usr/bin/python3). The store server
runs in this process (as rank 0 hosts it in torch.distributed); every client
is its own process (Python's GIL would serialize threads), calling set, get or
add back to back for --seconds on its own keys, 16-byte values, 1000 keys per
client, like collie's benchmark.

    /usr/bin/python3 tools/peers/torch_tcpstore_bench.py --clients 4 --seconds 2
"""
import argparse
import datetime
import multiprocessing as mp
import time

import torch
import torch.distributed as dist


def client(port, op, index, seconds, value, start, results):
    store = dist.TCPStore("127.0.0.1", port, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
    keys = [f"bench/{op}/{index}/{i}" for i in range(1000)]
    if op == "get":
        for k in keys:
            store.set(k, value)
    start.wait()
    n = 0
    deadline = time.perf_counter() + seconds
    while True:
        k = keys[n % 1000]
        if op == "set":
            store.set(k, value)
        elif op == "get":
            store.get(k)
        else:
            store.add(k, 1)
        n += 1
        if n % 64 == 0 and time.perf_counter() >= deadline:
            break
    results.put(n)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()

    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=60))
    port = master.port
    value = b"v" * 16
    print(f"# torch {torch.__version__} TCPStore on 127.0.0.1:{port}; 16-byte values; "
          f"{args.seconds} s per measurement")
    print("#   op  clients      ops/s")
    for clients in sorted({1, args.clients}):
        for op in ("set", "get", "add"):
            start = mp.Barrier(clients + 1)
            results = mp.Queue()
            procs = [mp.Process(target=client,
                                args=(port, op, i, args.seconds, value, start, results))
                     for i in range(clients)]
            for p in procs:
                p.start()
            start.wait()
            t0 = time.perf_counter()
            total = sum(results.get() for _ in procs)
            elapsed = time.perf_counter() - t0
            for p in procs:
                p.join()
            print(f"  {op:>4}  {clients:7d}  {total / elapsed:9.0f}", flush=True)


if __name__ == "__main__":
    main()

# Run by collie launch (cli_torchrun_test.cpp): rank 2 stops itself with
# SIGSTOP before the second all_reduce; the others wait for it until their
# timeout (12 s) and print what they raised, which should name rank 2 as
# stopped (the stall inspector's report), then exit 3.
import datetime, os, signal, sys, time, torch
import torch.distributed as dist
dist.init_process_group("collie", timeout=datetime.timedelta(seconds=12))
rank = dist.get_rank()
t = torch.ones(1000)
dist.all_reduce(t)
if rank == 2:
    print("rank 2: stopping itself", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
started = time.monotonic()
try:
    dist.all_reduce(t)
    print(f"rank {rank}: completed", flush=True)
except RuntimeError as e:
    print(f"rank {rank}: after {time.monotonic() - started:.1f} s: {e}", flush=True)
    sys.exit(3)

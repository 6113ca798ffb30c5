"""Training that loses a rank and goes on in the same processes, then takes a
replacement back (collie_torch.ElasticGroup).

    collie launch -n 4 --keep-going --max-restarts 1 -- python3 elastic.py

Full-batch gradient descent on a linear model (float64): at each step every
member computes the gradient of its share of the step's batch (rows
rank, rank + size, ...), one all_reduce sums the shares, and every member
takes the same step. The result does not depend on how many ranks share the
batch, so each rank checks its weights at the end against the same training
run in one process.

ELASTIC_KILL=R:S kills rank R (SIGKILL) in the middle of step S's
all_reduce (in a job's first attempt only). The survivors' call fails naming it; they shrink the group,
take the state of the survivor furthest on, and redo the step. A
replacement (collie launch --max-restarts starts one, with COLLIE_JOIN=1)
joins at the members' next expand() and receives the weights and the step
from a member, with no checkpoint file.

ELASTIC_MIN_RANKS=N: below N ranks, the members wait for newcomers before
each step (a minute at most), as a job that needs its capacity back would.

ELASTIC_CHECKPOINT=PATH: rank 0 also saves the state there after each step,
and a process that finds the file starts from it: the same program then
recovers by a whole restart (collie launch --max-restarts 1 without
--keep-going), for comparison.

Each process prints "rank R: step S done (clock C ms)" as steps finish, and
at the end "rank R: done STEPS steps on N ranks, weights match the
single-process run".
"""

import os
import signal
import time

import torch
import torch.distributed as dist

import collie_torch

STEPS = int(os.environ.get("ELASTIC_STEPS", "30"))
MIN_RANKS = int(os.environ.get("ELASTIC_MIN_RANKS", "0"))
FEATURES = int(os.environ.get("ELASTIC_FEATURES", "512"))
BATCH = 64
LR = 0.05


def clock_ms():
    return int(time.monotonic() * 1000)


def batch(step):
    """The step's whole batch, the same in every process."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH, FEATURES, generator=g, dtype=torch.float64)
    truth = torch.Generator().manual_seed(7)
    w_true = torch.randn(FEATURES, FEATURES, generator=truth, dtype=torch.float64) / FEATURES
    return x, x @ w_true.T


def gradient(w, b, x, y):
    """The gradient of 0.5 * sum((x w^T + b - y)^2) / BATCH over these rows."""
    error = x @ w.T + b - y
    return error.T @ x / BATCH, error.sum(dim=0) / BATCH


def initial():
    g = torch.Generator().manual_seed(3)
    return (torch.randn(FEATURES, FEATURES, generator=g, dtype=torch.float64) * 0.01,
            torch.zeros(FEATURES, dtype=torch.float64))


def single_process_run():
    w, b = initial()
    for s in range(STEPS):
        x, y = batch(s)
        gw, gb = gradient(w, b, x, y)
        w -= LR * gw
        b -= LR * gb
    return w, b


def main():
    kill = os.environ.get("ELASTIC_KILL")
    victim, kill_step = (int(v) for v in kill.split(":")) if kill else (-1, -1)
    checkpoint = os.environ.get("ELASTIC_CHECKPOINT")
    eg = collie_torch.ElasticGroup()
    me = f"{eg.rank()}" if not eg.is_newcomer else f"{eg.rank()} (newcomer)"
    w, b = initial()
    step = torch.zeros(1, dtype=torch.int64)
    state = {"step": step, "w": w, "b": b}
    if eg.is_newcomer:
        eg.sync_state(state)
        print(f"rank {me}: joined at step {int(step)} of {eg.size()} ranks", flush=True)
    elif checkpoint and os.path.exists(checkpoint):
        saved = torch.load(checkpoint)
        for name, t in state.items():
            t.copy_(saved[name])
        print(f"rank {me}: resumed from the checkpoint at step {int(step)} (clock {clock_ms()} ms)",
              flush=True)
    # (Once: not again in a restarted job.)
    dying = (os.environ.get("RANK") == str(victim) and not eg.is_newcomer
             and os.environ.get("COLLIE_RESTART_COUNT", "0") == "0")
    while int(step) < STEPS:
        s = int(step)
        try:
            # Below ELASTIC_MIN_RANKS, wait for newcomers (a minute at most):
            # every member calls expand() as often as the others, so the
            # attempts are counted, not timed. (A member lost since the last
            # step fails expand(), as it fails the step.)
            for attempt in range(1200):
                if eg.expand():
                    eg.sync_state(state)
                    print(f"rank {me}: {len(eg.newcomers)} joined; {eg.size()} ranks "
                          f"(clock {clock_ms()} ms)", flush=True)
                if eg.size() >= MIN_RANKS:
                    break
                time.sleep(0.05)
            x, y = batch(s)
            rank, size = eg.rank(), eg.size()
            gw, gb = gradient(w, b, x[rank::size], y[rank::size])
            flat = torch.cat([gw.reshape(-1), gb])
            work = dist.all_reduce(flat, group=eg.group, async_op=True)
            if dying and s == kill_step:
                time.sleep(0.005)
                print(f"rank {me}: dying (clock {clock_ms()} ms)", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            work.wait()
        except RuntimeError as e:
            print(f"rank {me}: step {s} failed (clock {clock_ms()} ms): {e}", flush=True)
            eg.recover(state)
            me = f"{eg.rank()}" if not eg.is_newcomer else f"{eg.rank()} (newcomer)"
            print(f"rank {me}: recovered with {eg.size()} ranks at step {int(step)} "
                  f"(clock {clock_ms()} ms)", flush=True)
            continue
        w -= LR * flat[:-FEATURES].reshape(FEATURES, FEATURES)
        b -= LR * flat[-FEATURES:]
        step += 1
        print(f"rank {me}: step {s} done (clock {clock_ms()} ms)", flush=True)
        if checkpoint and eg.rank() == 0:
            torch.save({name: t.clone() for name, t in state.items()}, checkpoint + ".new")
            os.replace(checkpoint + ".new", checkpoint)
    w_ref, b_ref = single_process_run()
    scale = float(w_ref.abs().max())
    close = (w - w_ref).abs().max() <= 1e-9 * scale and (b - b_ref).abs().max() <= 1e-9 * scale
    if not close:
        raise SystemExit(f"rank {me}: the weights differ from the single-process run by "
                         f"{float((w - w_ref).abs().max()):.3e}")
    print(f"rank {me}: done {STEPS} steps on {eg.size()} ranks, weights match the "
          f"single-process run", flush=True)


if __name__ == "__main__":
    main()

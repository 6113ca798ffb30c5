"""monitored_barrier for a group of any backend, naming the ranks that did not arrive.

torch 1.13's dist.monitored_barrier works with gloo alone ("monitored_barrier is
only implemented for GLOO backend"). This one meets in the group's store, as
gloo's does between its ranks: every rank says it arrived; the group's first
rank waits up to `timeout` for them all and then names those missing (only
the first, as gloo does, unless `wait_all_ranks`); every rank raises that
error, and a rank that waits in vain for the first rank's verdict names it.
"""

import datetime
import time

import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

__all__ = ["monitored_barrier", "monitored_barrier_of_backend"]

# Calls made on each group so far, by this process: the key of the next one.
_calls = {}


def _milliseconds(timeout):
    return int(timeout.total_seconds() * 1000)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """Like torch.distributed.monitored_barrier, for any backend (collie's too)."""
    group = group if group is not None else _c10d._get_default_group()
    if timeout is None:
        timeout = _c10d.default_pg_timeout
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    ranks = sorted(_c10d._pg_group_ranks[group].keys())  # global ranks
    me = dist.get_rank()
    if len(ranks) == 1:
        return
    store = _c10d._get_default_store()
    call = _calls.get(group, 0)
    _calls[group] = call + 1
    base = "collie/monitored_barrier/%s/%d" % ("-".join(map(str, ranks)), call)
    verdict = base + "/verdict"
    if me != ranks[0]:
        store.set("%s/arrived/%d" % (base, me), "1")
        try:
            store.wait([verdict], timeout)
        except RuntimeError:
            raise RuntimeError(
                "rank %d: monitored_barrier: rank %d (the group's first) gave no verdict "
                "within %d ms: it did not arrive, or failed" % (me, ranks[0], _milliseconds(timeout)))
        said = store.get(verdict).decode()
        if said != "ok":
            # gloo's words, then what the first rank found.
            raise RuntimeError(
                "Rank %d successfully reached monitoredBarrier, but received errors while waiting "
                "for send/recv from rank %d: %s" % (me, ranks[0], said))
        return
    # (torch's Python Store has no check(): a wait with what is left of the
    # timeout, at least a millisecond, tells whether a rank is in.)
    # The ranks in order, as gloo's: without wait_all_ranks the first that
    # does not arrive in what is left of the timeout is named, and a
    # timeout spent before a rank was looked at is this rank's own.
    deadline = time.monotonic() + timeout.total_seconds()
    waiting = []
    for r in ranks[1:]:
        left = deadline - time.monotonic()
        if left <= 0 and not wait_all_ranks:
            said = "Rank %d timed out in monitoredBarrier after %d ms" % (
                me, _milliseconds(timeout))
            store.set(verdict, said)
            raise RuntimeError(said)
        try:
            store.wait(["%s/arrived/%d" % (base, r)],
                       datetime.timedelta(seconds=max(left, 0.001)))
        except RuntimeError:
            waiting.append(r)
            if not wait_all_ranks:
                break
    if not waiting:
        store.set(verdict, "ok")
        return
    missing = waiting if wait_all_ranks else waiting[:1]
    said = "%s %s failed to pass monitoredBarrier in %d ms" % (
        "Ranks" if len(missing) > 1 else "Rank", ", ".join(map(str, missing)),
        _milliseconds(timeout))
    store.set(verdict, said)
    raise RuntimeError("rank %d: %s" % (me, said))


def monitored_barrier_of_backend(address, timeout, wait_all_ranks):
    """A group's monitored_barrier method on torch 2, where collie's backend
    knows only itself: the torch group around the backend at `address`."""
    from ._collie_torch import backend_address
    for group in list(_c10d._world.pg_map):
        if backend_address(group) == address:
            return monitored_barrier(group, timeout, wait_all_ranks)
    raise RuntimeError("collie: monitored_barrier: no torch group has this backend")

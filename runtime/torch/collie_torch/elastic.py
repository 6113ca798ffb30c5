"""Training that goes on in the same processes when a rank is lost, and takes
replacements back between steps (collie's shrink() and expand(),
docs/failures.md).

    eg = collie_torch.ElasticGroup()    # under collie launch --keep-going --max-restarts N
    state = {"step": step, **model.state_dict()}
    if eg.is_newcomer:
        eg.sync_state(state)            # the members' state: no checkpoint file
    while int(step) < steps:
        try:
            if eg.expand():             # newcomers were waiting: they are in now
                eg.sync_state(state)
            ...                         # dist.all_reduce(grads, group=eg.group), step += 1
        except RuntimeError:            # a rank was lost (collie's error names it)
            eg.recover(state)           # the survivors, and the furthest one's state

`eg.group` is a torch process group (dist.all_reduce(t, group=eg.group),
DistributedDataParallel's process_group); each shrink or expand replaces it,
so read it again after either (and wrap a DDP model again). The group is a
collie world of its own, made from RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT as collie::init() makes it, not torch's default group: its
store must outlive any rank, as `collie launch`'s does (or etcd://,
COLLIE_INIT_METHOD). A process started with COLLIE_JOIN=1 (collie launch's
replacements are) is a newcomer: ElasticGroup() waits until the members'
next expand() admits it.
"""

import datetime

import torch
import torch.distributed as dist

from ._collie_torch import (elastic_expand, elastic_init, elastic_newcomers, elastic_shrink,
                            elastic_sync_state)

__all__ = ["ElasticGroup"]


def _as_timedelta(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        return timeout
    return datetime.timedelta(seconds=timeout)


class ElasticGroup:
    """A collie group whose members change between steps: shrink() when a
    rank is lost, expand() to take newcomers in, sync_state() to hand them
    what they need."""

    def __init__(self, timeout=None):
        self.group = elastic_init(_as_timedelta(timeout))

    def rank(self):
        return self.group.rank()

    def size(self):
        return self.group.size()

    @property
    def newcomers(self):
        """The ranks that joined at the expand() that made the group."""
        return elastic_newcomers(self.group)

    @property
    def is_newcomer(self):
        return self.group.rank() in self.newcomers

    def shrink(self, timeout=None):
        """The members still alive, as the new self.group (a collective of
        the survivors: collie's ProcessGroup::shrink())."""
        self.group = elastic_shrink(self.group, _as_timedelta(timeout))
        return self.group

    def expand(self):
        """Takes in the newcomers waiting now (a collective of the members,
        between steps). True if any joined: then hand them the state
        (sync_state) before the next step. Where newcomers wait, a member
        lost since the last call raises RuntimeError naming it, as a failed
        step does: call it inside the step's try, and recover()."""
        before = self.group
        self.group = elastic_expand(self.group)
        return self.group is not before

    def sync_state(self, state, root=0):
        """Every member's tensors of `state` (a dict of name -> tensor, alike
        on every member: the same names in the same order, shapes and
        dtypes) become `root`'s, in place. Tensors elsewhere than in
        contiguous CPU memory go through a CPU copy."""
        names, staged, back = [], [], []
        for name, t in state.items():
            if not isinstance(t, torch.Tensor):
                raise TypeError("collie_torch: sync_state: '%s' is a %s, not a tensor"
                                % (name, type(t).__name__))
            t = t.detach()
            if t.device.type == "cpu" and t.is_contiguous():
                staged.append(t)
            else:
                copy = t.to("cpu").contiguous()
                staged.append(copy)
                back.append((t, copy))
            names.append(name)
        elastic_sync_state(self.group, names, staged, root)
        for t, copy in back:
            t.copy_(copy)

    def recover(self, state, step="step", attempts=3, timeout=None):
        """After a call failed for a lost rank: shrink, then give every
        survivor the state of the one furthest on (`state[step]`, a
        one-element integer tensor, says how far each is: a step's
        all_reduce may finish on one survivor and fail on another). Tries
        again where a member dies meanwhile, up to `attempts` times."""
        for attempt in range(attempts):
            self.shrink(timeout)
            try:
                furthest = state[step].detach().to("cpu").clone().reshape(1)
                dist.all_reduce(furthest, op=dist.ReduceOp.MAX, group=self.group)
                at = int(state[step].reshape(-1)[0])
                root = torch.tensor([self.group.rank() if at == int(furthest[0])
                                     else self.group.size()])
                dist.all_reduce(root, op=dist.ReduceOp.MIN, group=self.group)
                self.sync_state(state, int(root[0]))
                return self.group
            except RuntimeError:
                if attempt + 1 == attempts:
                    raise
        return self.group

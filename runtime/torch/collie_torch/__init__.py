"""collie as a torch.distributed backend.

    import collie_torch                          # registers the backend "collie"
    torch.distributed.init_process_group("collie", rank=r, world_size=n)

Every collective and point-to-point call of torch.distributed then runs over
collie's mesh and algorithms (shared memory between ranks of one host, TCP
between hosts). CPU and CUDA tensors (staged through pinned host memory),
contiguous, of the dtypes collie carries. init_method="etcd://HOST:PORT,.../JOB"
meets in an etcd cluster (etcd.py). ElasticGroup (elastic.py) goes on in the same
processes when a rank is lost, and takes replacements back. docs/torch.md says
more.
"""

import inspect

import torch.distributed as _dist

from ._collie_torch import __version__, create_process_group, describe_transport
from .monitored import monitored_barrier
from .elastic import ElasticGroup
from . import etcd as _etcd

__all__ = ["__version__", "create_process_group", "describe_transport", "monitored_barrier",
           "ElasticGroup"]


def _create(store, rank, size, timeout):
    if rank is None or size < 1:
        # torch 1.13 takes new_group([]) for a group of the whole world but
        # gives its creator no rank.
        raise ValueError("collie: torch asked for a group of %r ranks with this process's rank "
                         "%r; new_group needs a list of the group's ranks" % (size, rank))
    # A sub-group's errors give each rank's global number too: its members
    # tell each other theirs (the default group's are its own).
    global_rank = _dist.get_rank() if _dist.is_initialized() else -1
    _name_collie_in_ddp_logging()  # here, not at import: torch may be half imported then
    return create_process_group(store, rank, size, timeout, global_rank=global_rank)


def _register():
    # Importing twice (a module reloaded, mp.spawn's children) registers once.
    if "COLLIE" in getattr(_dist.Backend, "_plugins", {}):
        return
    # torch 2 asks which devices a backend serves; torch 1.13 does not.
    if "devices" in inspect.signature(_dist.Backend.register_backend).parameters:
        _dist.Backend.register_backend("collie", _create, devices=["cpu", "cuda"])
    else:
        _dist.Backend.register_backend("collie", _create)


def _is_collie(group):
    """Whether a group's backend is collie's, whatever name torch made it
    under (a test suite's stand-in for gloo's, say)."""
    try:
        describe_transport(group)
        return True
    except (RuntimeError, TypeError):
        return False


def _route_monitored_barrier():
    """torch's own dist.monitored_barrier (1.13's and 2's) takes gloo groups
    alone ("monitored_barrier is only implemented for GLOO backend"): for a
    collie group it now runs collie's (monitored.py); any other group goes
    to torch's, untouched."""
    from torch.distributed import distributed_c10d as c10d
    original = c10d.monitored_barrier
    if getattr(original, "_collie_routes", False):
        return

    def routed(group=None, timeout=None, wait_all_ranks=False):
        # A collie group: the backend torch made it with (torch 2 names
        # every plugin's ProcessGroup "custom").
        if c10d.is_initialized() and group is not c10d.GroupMember.NON_GROUP_MEMBER:
            to_use = group if group is not None else c10d._get_default_group()
            if c10d.get_backend(to_use) == "collie" or _is_collie(to_use):
                return monitored_barrier(group, timeout, wait_all_ranks)
        return original(group, timeout, wait_all_ranks)

    routed.__doc__ = original.__doc__
    routed._collie_routes = True
    c10d.monitored_barrier = routed
    _dist.monitored_barrier = routed


def _name_collie_in_ddp_logging():
    """torch 2's ProcessGroup names the backend of every plugin "custom", and
    DDP's logging data (DistributedDataParallel._get_ddp_logging_data) says
    so: for a collie group it says "collie", as torch.distributed.get_backend
    does; any other group's data is untouched."""
    from torch.nn.parallel import DistributedDataParallel
    original = DistributedDataParallel._get_ddp_logging_data
    if getattr(original, "_collie_names", False):
        return

    def named(self):
        data = original(self)
        if data.get("backend_name") == "custom" and _dist.get_backend(self.process_group) == "collie":
            data["backend_name"] = "collie"
        return data

    named.__doc__ = original.__doc__
    named._collie_names = True
    DistributedDataParallel._get_ddp_logging_data = named


_register()
_route_monitored_barrier()
_etcd.register()  # init_method="etcd://HOSTS/JOB" (etcd.py)

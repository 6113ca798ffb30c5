"""collie as a torch.distributed backend.

    import collie_torch                          # registers the backend "collie"
    torch.distributed.init_process_group("collie", rank=r, world_size=n)

Every collective and point-to-point call of torch.distributed then runs over
collie's mesh and algorithms (shared memory between ranks of one host, TCP
between hosts). CPU and CUDA tensors (staged through pinned host memory),
contiguous, of the dtypes collie carries. docs/torch.md says more.
"""

import inspect

import torch.distributed as _dist

from ._collie_torch import __version__, create_process_group, describe_transport
from .monitored import monitored_barrier

__all__ = ["__version__", "create_process_group", "describe_transport", "monitored_barrier"]


def _create(store, rank, size, timeout):
    if rank is None or size < 1:
        # torch 1.13 takes new_group([]) for a group of the whole world but
        # gives its creator no rank.
        raise ValueError("collie: torch asked for a group of %r ranks with this process's rank "
                         "%r; new_group needs a list of the group's ranks" % (size, rank))
    return create_process_group(store, rank, size, timeout)


def _register():
    # Importing twice (a module reloaded, mp.spawn's children) registers once.
    if "COLLIE" in getattr(_dist.Backend, "_plugins", {}):
        return
    # torch 2 asks which devices a backend serves; torch 1.13 does not.
    if "devices" in inspect.signature(_dist.Backend.register_backend).parameters:
        _dist.Backend.register_backend("collie", _create, devices=["cpu", "cuda"])
    else:
        _dist.Backend.register_backend("collie", _create)


_register()

"""Lets torch.distributed programs use backend="collie" unchanged: where this
directory (<build>/python) is on PYTHONPATH, as collie launch puts it, the
first import of torch.distributed also imports collie_torch, which
registers the backend. Nothing is imported before the program imports
torch.distributed itself. Then the sitecustomize this one shadows
(Debian's, say) runs as it would have.

torch 2's TCPStore asks for libuv unless told otherwise, and torch's own
callers (env://, torchrun's rendezvous) ask for it by default; a torch built without libuv (Debian 13's 2.6) then fails
them all ("use_libuv was requested but PyTorch was build without libuv
support"; env:// passes torch's own default). Here torch.distributed.TCPStore,
where a constructor meets that error, makes the store without libuv
instead, unless USE_LIBUV=1 asks for it by name; a torch that has libuv
sees no difference."""

import importlib.abc
import importlib.util
import os
import sys


class _RegisterCollie(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torch.distributed":
            return None
        sys.meta_path.remove(self)  # once; and not for the lookup below
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def run_then_register(module):
            run(module)
            _tcp_store_without_libuv_where_missing()
            try:
                import collie_torch  # noqa: F401
            except ImportError:
                pass  # built without torch, or torch without distributed

        spec.loader.exec_module = run_then_register
        return spec


def _tcp_store_without_libuv_where_missing():
    import torch.distributed as dist
    base = getattr(dist, "TCPStore", None)
    if base is None or getattr(base, "_collie_libuv_fallback", False):
        return
    missing = []  # [True] once this torch said it has no libuv

    def insists():  # the user asked for libuv by name
        return os.environ.get("USE_LIBUV") == "1"

    class TCPStore(base):
        __doc__ = base.__doc__
        _collie_libuv_fallback = True

        def __init__(self, *args, **kwargs):
            if missing and not insists():
                kwargs["use_libuv"] = False
                return super().__init__(*args, **kwargs)
            try:
                return super().__init__(*args, **kwargs)
            except RuntimeError as e:
                if "without libuv support" not in str(e) or insists():
                    raise
                missing.append(True)
            kwargs["use_libuv"] = False
            super().__init__(*args, **kwargs)

    TCPStore.__name__ = TCPStore.__qualname__ = base.__name__
    TCPStore.__module__ = base.__module__
    dist.TCPStore = TCPStore
    # The modules of torch.distributed that took the name already.
    for name in ("torch.distributed.rendezvous",):
        module = sys.modules.get(name)
        if getattr(module, "TCPStore", None) is base:
            module.TCPStore = TCPStore


sys.meta_path.insert(0, _RegisterCollie())


def _run_shadowed():
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sitecustomize.py")
        if os.path.abspath(os.path.dirname(candidate)) == here or not os.path.isfile(candidate):
            continue
        spec = importlib.util.spec_from_file_location("_collie_shadowed_sitecustomize", candidate)
        if spec and spec.loader:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        return


_run_shadowed()

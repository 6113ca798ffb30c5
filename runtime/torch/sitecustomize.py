"""Lets torch.distributed programs use backend="collie" unchanged: where this
directory (<build>/python) is on PYTHONPATH, as collie launch puts it, the
first import of torch.distributed also imports collie_torch, which
registers the backend. Nothing is imported before the program imports
torch.distributed itself. Then the sitecustomize this one shadows
(Debian's, say) runs as it would have."""

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
            try:
                import collie_torch  # noqa: F401
            except ImportError:
                pass  # built without torch, or torch without distributed

        spec.loader.exec_module = run_then_register
        return spec


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

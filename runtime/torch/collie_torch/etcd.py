"""torch.distributed's etcd:// init method, for programs started without a
launcher (by hand, by Slurm):

    import collie_torch
    dist.init_process_group("collie", init_method="etcd://10.0.0.1:2379,10.0.0.2:2379/JOB",
                            rank=r, world_size=n)     # or RANK / WORLD_SIZE in the environment

The ranks meet in an etcd cluster, under /collie/JOB/, through collie's etcd
store: no rank hosts a store, and losing a minority of etcd's members goes
unnoticed. etcd is reached over TLS with the client certificate of
COLLIE_ETCD_CACERT, COLLIE_ETCD_CERT and COLLIE_ETCD_KEY, or over plain
HTTP with COLLIE_ETCD_INSECURE=1 (said once on standard error). Any backend
may use it; collie's groups are the ones it is made for. Under `collie
launch`, use its --rdzv-backend etcd instead (docs/launching.md).
"""

import datetime
import importlib
import os
import sys
import urllib.parse

import torch.distributed as _dist

from ._collie_torch import EtcdStore, parse_etcd_endpoints

_said_insecure = False


def _bytes(value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


class _Store(_dist.Store):
    """torch's Store interface on collie's etcd store."""

    def __init__(self, inner):
        super().__init__()
        self._inner = inner

    def set(self, key, value):
        self._inner.set(key, _bytes(value))

    def get(self, key):
        return self._inner.get(key, self.timeout)

    def add(self, key, value):
        return self._inner.add(key, value)

    def compare_set(self, key, expected_value, desired_value):
        return self._inner.compare_set(key, _bytes(expected_value), _bytes(desired_value))

    def check(self, keys):
        return self._inner.check(list(keys))

    def wait(self, keys, timeout=None):
        self._inner.wait(list(keys), timeout if timeout is not None else self.timeout)

    def delete_key(self, key):
        return self._inner.delete_key(key)

    def num_keys(self):
        return self._inner.num_keys()


def _number(query, name, variable):
    text = query.get(name, os.environ.get(variable))
    if text is None:
        raise ValueError("collie: init_method etcd:// needs the %s: pass %s= to "
                         "init_process_group, or set %s" % (name.replace("_", " "), name,
                                                            variable))
    return int(text)


def _handler(url, timeout=datetime.timedelta(seconds=300), **kwargs):
    parts = urllib.parse.urlparse(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    job = parts.path.strip("/")
    if not job or "/" in job or not parts.netloc:
        raise ValueError("collie: %r is not etcd://HOST:PORT[,HOST:PORT...]/JOB" % url)
    endpoints = parse_etcd_endpoints(parts.netloc)
    rank = _number(query, "rank", "RANK")
    world_size = _number(query, "world_size", "WORLD_SIZE")
    insecure = os.environ.get("COLLIE_ETCD_INSECURE", "0") == "1"
    global _said_insecure
    if insecure and not _said_insecure:
        _said_insecure = True
        sys.stderr.write("collie: the job's keys in etcd at %s travel over plain HTTP without "
                         "certificates (COLLIE_ETCD_INSECURE=1): anyone who reaches etcd can "
                         "read and change them\n" % parts.netloc)
    inner = EtcdStore(endpoints, "/collie/%s/" % job, os.environ.get("COLLIE_ETCD_CACERT", ""),
                      os.environ.get("COLLIE_ETCD_CERT", ""),
                      os.environ.get("COLLIE_ETCD_KEY", ""), insecure, timeout)
    store = _Store(inner)
    store.set_timeout(timeout)
    yield (store, rank, world_size)
    raise RuntimeError("collie: the etcd:// init method meets once; make a new group instead")


def register():
    # (torch.distributed.rendezvous is also the name of a function there.)
    module = importlib.import_module("torch.distributed.rendezvous")
    if "etcd" not in getattr(module, "_rendezvous_handlers", {}):
        module.register_rendezvous_handler("etcd", _handler)

"""Master-worker mode for torch programs: tensors that live on the workers.

The 2017 torch.distributed RFC's second mode, on collie (docs/master-worker.md):

    import torch
    import collie_torch.remote as dist          # the RFC's torch.distributed
    dist.init_master_worker(backend="collie")   # on every rank; workers serve here
    x = dist.FloatTensor(20, 20).fill_(4)       # on node 1, the default
    y = torch.randn(20, 20).dist_send()         # a copy of a local tensor, on node 1
    z = x + y                                   # queued on node 1, returns at once
    with dist.node(2):
        a = dist.FloatTensor(10)                # on node 2
    print(z.get())                              # the sync point: the values come back

Rank 0 is the master and runs the program; the other ranks (the nodes, 1 to
world size - 1) serve in init_master_worker() and exit when the master's
program ends. Start it with `collie launch --master-worker -n N -- python3
prog.py`.

What runs where. Every operation on remote tensors (operators, torch
functions and Tensor methods alike) is queued on the node that holds its
first remote operand, in the master's program order, and returns a remote
tensor at once (its shape found on the master with torch's meta tensors).
Operands on other nodes are copied there first, straight between the
workers; local tensors among the operands are sent. get() (also
to_local(), item(), tolist()) is the sync point: it waits for everything
queued before on that node and brings the values back.

Failures are named: an operation that raises on its worker fails what reads
its result, with the worker's message, and a worker that dies fails what was
queued on it within a second; the master's program goes on with the others.
"""

import atexit
import contextlib
import json
import sys
import warnings

import torch

from . import _collie_torch as _c

__all__ = ["init_master_worker", "node", "current_node", "world_size", "RemoteTensor",
           "FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor",
           "IntTensor", "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor", "empty",
           "zeros", "ones", "full", "tensor", "all_reduce", "synchronize"]

_started = False
_nodes = [1]          # the node stack: `with node(i)` pushes
_inflight = []        # events whose master-side tensors must live until done
_warned_device = set()
_devices = {}         # node -> how many CUDA devices collie can use there


def _dtype_name(dtype):
    return str(dtype).split(".")[1]


def init_master_worker(backend="collie"):
    """Joins the job (env://, as collie launch sets it). On the master
    (rank 0) it returns; on a worker it serves the master until the master's
    program ends, then exits the process."""
    global _started
    if backend not in ("collie", "mpi", "gloo", "tcp"):
        raise ValueError("collie_torch.remote: unknown backend %r" % (backend,))
    if _started:
        raise RuntimeError("collie_torch.remote: init_master_worker() was called twice")
    _started = True
    if not _c.mw_start(_dispatch):
        sys.exit(0)
    atexit.register(_c.mw_finish)


def world_size():
    """The number of ranks: the master and its nodes (1 to world_size() - 1)."""
    return _c.mw_world_size()


def current_node():
    return _nodes[-1]


@contextlib.contextmanager
def node(i):
    """Tensors made inside the block live on node `i` (a worker's rank)."""
    if not isinstance(i, int) or not 1 <= i < world_size():
        raise ValueError("collie_torch.remote: node %r is not a worker (nodes are 1 to %d)"
                         % (i, world_size() - 1))
    _nodes.append(i)
    try:
        yield
    finally:
        _nodes.pop()


_prune_at = 64


def _keep(event):
    """Keeps a write's event (it holds the local tensor the worker reads)
    until done; the done ones are let go now and then, in time linear in
    the number of writes."""
    global _prune_at
    _inflight.append(event)
    if len(_inflight) >= _prune_at:
        _inflight[:] = [e for e in _inflight if not e.ready()]
        _prune_at = max(64, 2 * len(_inflight))
    return event


def synchronize():
    """Waits until everything queued so far on every node has run (errors
    stay with the tensors they poisoned: get() raises them)."""
    _c.mw_synchronize()
    _inflight[:] = []


class RemoteTensor:
    """A tensor on a worker (its node). Operations on it are queued there."""

    __slots__ = ("_buffer", "shape", "dtype", "node", "_device")

    def __init__(self, buffer, shape, dtype, node_rank, device_index=-1):
        self._buffer = buffer
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self.node = node_rank
        self._device = device_index

    # ---- what a tensor says about itself, without a round trip
    @property
    def device(self):
        """Where it lives on its node: cpu, or cuda:N."""
        return torch.device("cpu") if self._device < 0 else torch.device("cuda", self._device)

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self):
        return len(self.shape)

    def numel(self):
        return self.shape.numel()

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        where = "" if self._device < 0 else ", device=%s" % self.device
        return "RemoteTensor(shape=%s, dtype=%s, node=%d%s)" % (tuple(self.shape), self.dtype,
                                                                  self.node, where)

    # ---- the sync points
    def get(self, timeout=None):
        """The values, back on the master (waits for what was queued before)."""
        out = torch.empty(self.shape, dtype=self.dtype)
        _c.mw_read(self._buffer, out).wait(timeout)
        return out

    to_local = get

    def item(self):
        return self.get().item()

    def tolist(self):
        return self.get().tolist()

    def __bool__(self):
        return bool(self.get())

    def __float__(self):
        return float(self.get())

    def __int__(self):
        return int(self.get())

    # ---- moving
    def to_node(self, n, device=-1):
        """A copy on node `n` (its host memory, or CUDA device `device`),
        straight from this node."""
        if n == self.node and device == self._device:
            return self
        out = _alloc(self.shape, self.dtype, n, device)
        _c.mw_copy(out._buffer, self._buffer)
        return out

    def copy_(self, src):
        if isinstance(src, torch.Tensor):
            src = src.to(self.dtype).contiguous()
            if src.shape != self.shape:
                src = src.expand(self.shape).contiguous()
            _keep(_c.mw_write(self._buffer, src))
            return self
        return _apply("method", "copy_", (self, src), {})

    # ---- everything else is queued on the node
    def __getattr__(self, name):
        if name.startswith("__") or not hasattr(torch.Tensor, name):
            raise AttributeError("RemoteTensor has no attribute %r" % (name,))
        return lambda *args, **kwargs: _apply("method", name, (self,) + args, kwargs)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # torch.add(x, y), and a local tensor's operators given a remote one
        # (local + remote reaches here as Tensor.__add__).
        name = func.__name__
        if hasattr(torch, name) and not name.startswith("__"):
            return _apply("fn", name, args, kwargs or {})
        return _apply("method", name, args, kwargs or {})


def _binary(name, reflected=False):
    def op(self, other):
        args = (other, self) if reflected else (self, other)
        return _apply("fn", name, args, {})
    return op


for _name, _fn in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("truediv", "div"),
                   ("matmul", "matmul"), ("pow", "pow"), ("floordiv", "floor_divide"),
                   ("mod", "remainder")]:
    setattr(RemoteTensor, "__%s__" % _name, _binary(_fn))
    setattr(RemoteTensor, "__r%s__" % _name, _binary(_fn, reflected=True))
for _name, _fn in [("lt", "lt"), ("le", "le"), ("gt", "gt"), ("ge", "ge"), ("eq", "eq"),
                   ("ne", "ne")]:
    setattr(RemoteTensor, "__%s__" % _name, _binary(_fn))
for _name, _fn in [("iadd", "add_"), ("isub", "sub_"), ("imul", "mul_"), ("itruediv", "div_")]:
    setattr(RemoteTensor, "__%s__" % _name,
            (lambda m: lambda self, other: _apply("method", m, (self, other), {}))(_fn))
RemoteTensor.__neg__ = lambda self: _apply("fn", "neg", (self,), {})
RemoteTensor.__abs__ = lambda self: _apply("fn", "abs", (self,), {})
RemoteTensor.__hash__ = object.__hash__


# ---- queuing an operation

def _alloc(shape, dtype, node_rank, device=-1):
    shape = torch.Size(shape)
    buffer = _c.mw_alloc(node_rank, _dtype_name(dtype), max(shape.numel(), 0), device)
    return RemoteTensor(buffer, shape, dtype, node_rank, device)


def _find_remotes(value, found):
    if isinstance(value, RemoteTensor):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _find_remotes(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            _find_remotes(v, found)


def _encode(value, tensors, meta, target):
    """The operation's arguments as JSON, each tensor an index into the
    kernel's buffers; `meta` gets the same arguments for shape inference.
    `target` is (node, device): where the operation runs."""
    if isinstance(value, RemoteTensor):
        here = value.to_node(*target)
        tensors.append(here)
        meta.append(torch.empty(here.shape, dtype=here.dtype, device="meta"))
        return {"t": len(tensors) - 1}
    if isinstance(value, torch.Tensor):
        return _encode(_send(value, *target), tensors, meta, target)
    if isinstance(value, tuple):
        return {"tuple": [_encode(v, tensors, meta, target) for v in value]}
    if isinstance(value, list):
        return [_encode(v, tensors, meta, target) for v in value]
    if isinstance(value, dict):
        return {"dict": {k: _encode(v, tensors, meta, target) for k, v in value.items()}}
    if isinstance(value, torch.dtype):
        return {"dtype": _dtype_name(value)}
    if isinstance(value, torch.Size):
        return {"tuple": list(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError("collie_torch.remote: cannot send an argument of type %s to a worker"
                    % type(value).__name__)


def _decode(value, tensors):
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if isinstance(value, dict):
        if "t" in value:
            return tensors[value["t"]]
        if "tuple" in value:
            return tuple(_decode(v, tensors) for v in value["tuple"])
        if "dtype" in value:
            return getattr(torch, value["dtype"])
        if "dict" in value:
            return {k: _decode(v, tensors) for k, v in value["dict"].items()}
    return value


def _apply(kind, name, args, kwargs):
    remotes = []
    _find_remotes(args, remotes)
    _find_remotes(kwargs, remotes)
    inplace = kind == "method" and name.endswith("_") and not name.startswith("__")
    target = (remotes[0].node, remotes[0]._device) if remotes else (current_node(), -1)
    tensors, meta = [], []
    enc_args = _encode(tuple(args), tensors, meta, target)
    enc_kwargs = _encode(dict(kwargs), tensors, meta, target)
    try:
        margs = _decode(enc_args, meta)
        mkwargs = _decode(enc_kwargs, meta)
        fn = getattr(margs[0], name) if kind == "method" else getattr(torch, name)
        result = fn(*margs[1:], **mkwargs) if kind == "method" else fn(*margs, **mkwargs)
    except (NotImplementedError, RuntimeError) as e:
        raise RuntimeError("collie_torch.remote: %s: %s" % (name, e)) from None
    if inplace:
        # The tensor it changes is an output too: a failure poisons it.
        spec = {"kind": kind, "op": name, "args": enc_args, "kwargs": enc_kwargs,
                "in": [list(t.shape) for t in tensors], "out": [list(args[0].shape)],
                "result": "inplace"}
        _c.mw_torch(target[0], [t._buffer for t in tensors], [args[0]._buffer],
                    json.dumps(spec))
        return args[0]
    if not isinstance(result, torch.Tensor):
        raise TypeError("collie_torch.remote: %s returns %s, not one tensor; only operations "
                        "that return a tensor can be queued" % (name, type(result).__name__))
    out = _alloc(result.shape, result.dtype, *target)
    spec = {"kind": kind, "op": name, "args": enc_args, "kwargs": enc_kwargs,
            "in": [list(t.shape) for t in tensors], "out": [list(out.shape)], "result": "copy"}
    _c.mw_torch(target[0], [t._buffer for t in tensors], [out._buffer], json.dumps(spec))
    return out


def _dispatch(text, inputs, outputs):
    """On a worker: the operation `text` describes, on the kernel's buffers."""
    spec = json.loads(text)
    ins = [t.view(s) for t, s in zip(inputs, spec["in"])]
    outs = [t.view(s) for t, s in zip(outputs, spec["out"])]
    args = _decode(spec["args"], ins)
    kwargs = _decode(spec["kwargs"], ins)
    if spec["kind"] == "method":
        result = getattr(args[0], spec["op"])(*args[1:], **kwargs)
    else:
        result = getattr(torch, spec["op"])(*args, **kwargs)
    if spec["result"] == "copy":
        outs[0].copy_(result)
    return 0.0


# ---- making remote tensors

def _shape_of(sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
        return torch.Size(sizes[0])
    return torch.Size(sizes)


def _where(device):
    """(node, device index) for a tensor made now: the current node, and
    the CUDA device `device` names there (-1: host memory). A node without
    that device (no GPU, or collie built without CUDA) holds it in host
    memory, and a warning says so once."""
    n = current_node()
    if device is None:
        return n, -1
    d = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if d.type == "cpu":
        return n, -1
    index = d.index or 0
    if n not in _devices:
        _devices[n] = _c.mw_cuda_devices(n)
    if d.type == "cuda" and index < _devices[n]:
        return n, index
    key = (n, str(device))
    if key not in _warned_device:
        _warned_device.add(key)
        warnings.warn("collie_torch.remote: device=%r on node %d: it has %d CUDA device(s) "
                      "collie can use; the tensor lives in its host memory"
                      % (device, n, _devices[n]), stacklevel=4)
    return n, -1


def empty(*sizes, dtype=torch.float32, device=None):
    return _alloc(_shape_of(sizes), dtype, *_where(device))


def full(sizes, value, dtype=torch.float32, device=None):
    return empty(sizes, dtype=dtype, device=device).fill_(value)


def zeros(*sizes, dtype=torch.float32, device=None):
    return empty(*sizes, dtype=dtype, device=device).fill_(0)


def ones(*sizes, dtype=torch.float32, device=None):
    return empty(*sizes, dtype=dtype, device=device).fill_(1)


def tensor(data, dtype=None, device=None):
    """A local tensor made from `data`, sent to the current node."""
    return _send(torch.tensor(data, dtype=dtype), *_where(device))


def _send(t, node_rank, device=-1):
    t = t.detach().cpu().contiguous()
    out = _alloc(t.shape, t.dtype, node_rank, device)
    _keep(_c.mw_write(out._buffer, t))
    return out


def _typed(dtype):
    def make(*sizes, device=None):
        return empty(*sizes, dtype=dtype, device=device)
    return make


FloatTensor = _typed(torch.float32)
DoubleTensor = _typed(torch.float64)
HalfTensor = _typed(torch.float16)
BFloat16Tensor = _typed(torch.bfloat16)
LongTensor = _typed(torch.int64)
IntTensor = _typed(torch.int32)
ShortTensor = _typed(torch.int16)
CharTensor = _typed(torch.int8)
ByteTensor = _typed(torch.uint8)
BoolTensor = _typed(torch.bool)


def all_reduce(tensors, op="sum"):
    """One remote tensor on each node, in node order, alike in shape and
    dtype: each ends with `op` over all of them (a collective among the
    workers)."""
    return _c.mw_all_reduce([t._buffer for t in tensors], op)


def _dist_send(self, node=None):
    """This tensor's values, sent to node `node` (default: the current one)."""
    return _send(self, current_node() if node is None else node)


torch.Tensor.dist_send = _dist_send

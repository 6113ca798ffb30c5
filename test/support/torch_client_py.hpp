// Python text for the tests' torch programs: torch's own TCPStore client as
// a program makes one to reach a store it does not host.
#pragma once

namespace collie::test {

// Defines torch_client(host, port, timeout): a TCPStore client without
// libuv, which torch 2 asks for unless told and Debian 13's torch 2.6 lacks
// ("use_libuv was requested but PyTorch was build without libuv support");
// torch 1.13 has no such argument. Put it before a program's own lines.
inline constexpr const char* kTorchClientPy = R"(
import torch.distributed as _dist
def torch_client(host, port, timeout):
    try:
        return _dist.TCPStore(host, port, is_master=False, timeout=timeout, use_libuv=False)
    except TypeError:  # torch 1.13
        return _dist.TCPStore(host, port, is_master=False, timeout=timeout)
)";

}  // namespace collie::test

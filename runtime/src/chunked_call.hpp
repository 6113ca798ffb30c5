// A large call on device buffers, run in chunks staged whole.
//
// all_reduce, broadcast and reduce act element by element, alike on every
// rank: such a call on a device buffer larger than COLLIE_STAGE_CHUNK_BYTES
// (4 MiB; 0: never) runs as consecutive calls on chunks of that size, each
// a host call on pinned blocks (two per side, used in turn). The copy of chunk k+1 out of
// the device and of chunk k-1 back into it run on the engine while chunk k's
// collective runs on the host: the few large copies overlap the collective,
// where staging segment by segment (executor.hpp) makes many small ones
// (slow where the GPU switches between processes for each). Only calls
// whose caller said their buffers are on a device (MemoryKind::Cuda, as the
// torch backend says for CUDA tensors) run so, for every rank must cut a
// call alike: a rank that did not would find its chunks mismatched (a
// MismatchError naming the counts). Every rank cuts a call into the same
// chunks (the same count, the same setting), and the chunks run in order
// under the call's sequence number: each message of a chunk comes after
// those of the chunk before on its connection and tag.
#pragma once

#include <cstddef>
#include <functional>

#include <collie/memory.hpp>

#include "call.hpp"
#include "device/device.hpp"

namespace collie {

// Whether `call` runs in chunks of `chunk_bytes`: a call its caller said
// is on a device (MemoryKind::Cuda), so that every rank decides alike.
bool runs_in_chunks(const Call& call, MemoryKind said, std::size_t chunk_bytes);

// Runs it: `run_host` runs each chunk's call (host buffers only); `engine`
// stages the device buffers (null where this rank has none: its chunks run
// all the same). Device errors throw DeviceError; the engine is drained
// before pinned blocks go back.
void run_in_chunks(const Call& call, device::Engine* engine, std::size_t chunk_bytes,
                   const std::function<void(const Call&)>& run_host);

}  // namespace collie

// The chunks strategy (staging.hpp): a large call on device buffers, run
// in chunks staged whole.
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
// chunks (the same count, the same setting), and each chunk is a call of
// its own in the group's numbering (the call takes a sequence number per
// chunk): a rank that runs ahead (a reduce's leaf) sends for a later chunk
// as it would for a later call.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>

#include <collie/memory.hpp>

#include "group/call.hpp"

namespace collie {

// How many chunks a call makes (the sequence numbers it takes); 1 unless
// its plan runs it in chunks (StagingPlan::chunk_bytes).
std::size_t chunks_of(const Call& call);

// Runs a call its plan runs in chunks: `run_host` runs each chunk's call
// (host buffers only), given the device error this rank met staging the
// chunk, if any, to throw inside the chunk's collective (where its peers
// hear of it, as of one met mid-collective); the plan's engine stages the
// device buffers (null where this rank has none: its chunks run all the
// same). The engine is drained before pinned blocks go back.
void run_in_chunks(const Call& call,
                   const std::function<void(const Call&, std::exception_ptr)>& run_host);

}  // namespace collie

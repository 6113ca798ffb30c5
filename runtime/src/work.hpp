// What a collie::Work waits on: each kind of operation's Work.
//
// A point-to-point Work waits on its transport request (with the transport
// driving the sockets in the waiting thread). An async collective runs on
// one of its group's AsyncRunners (group.hpp), started in call order, and
// its Work waits for the runner to say it is done (its own error, if it failed, is
// rethrown by wait()).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <collie/process_group.hpp>
#include <collie/transport/transport.hpp>

#include <collie/async_runner.hpp>
#include "group/handles.hpp"
#include "device/device.hpp"

namespace collie {

// The Work of an isend or irecv.
Work point_to_point_work(std::shared_ptr<transport::Transport> transport,
                         transport::RequestPtr request);

// The Work of a receive from any of `members` (world ranks, in group
// order) with `tag`; `what` leads its errors ("rank 2: recv from any rank
// on world (tag 0, 64 bytes)").
Work any_source_work(std::shared_ptr<transport::Transport> transport, std::vector<int> members,
                     std::uint64_t tag, void* data, std::size_t bytes,
                     std::chrono::milliseconds timeout, std::string what);

// The Work of a send from, or a receive into, device memory (`engine`'s
// device): the message staged whole through a pinned block. A device error
// (there, or at wait()) is a DeviceError led by `call` ("rank 0: send to
// rank 1").
Work staged_send(std::shared_ptr<transport::Transport> transport, int peer, std::uint64_t tag,
                 const void* data, std::size_t bytes, std::shared_ptr<device::Engine> engine,
                 const device::CallName& call);
Work staged_recv(std::shared_ptr<transport::Transport> transport, int peer, std::uint64_t tag,
                 void* data, std::size_t bytes, std::shared_ptr<device::Engine> engine,
                 const device::CallName& call);

// Queues `task` on `runner` and returns the Work that waits for it. `what`
// names it in a TimeoutError ("all_reduce(float32, 4, sum) #3 on world");
// a wait without a timeout gives up after `timeout` plus 5 s (the task has
// its own deadline of `timeout`).
Work run_async(AsyncRunner& runner, std::string what, std::chrono::milliseconds timeout,
               std::function<void()> task);

}  // namespace collie

// A worker's side of a master-worker run (master_worker.hpp): its buffers,
// its stream (the master's commands, run one after another in order), and
// the batches of completions it sends back.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/master_worker.hpp>
#include <collie/transport/transport.hpp>

#include "../device/device.hpp"
#include "wire.hpp"

namespace collie::mw {

class Worker {
 public:
  Worker(std::shared_ptr<transport::Transport> transport, ProcessGroup workers,
         const Kernels& kernels, Options options, const std::string& host);
  // Runs the master's commands until it says shutdown; throws
  // ConnectionError naming the master when it is gone.
  void serve();

 private:
  struct Buf {
    DataType dtype = DataType::Float32;
    std::size_t count = 0;
    std::size_t bytes = 0;
    std::shared_ptr<std::byte> data;  // null once allocation failed
    int device = -1;                  // the CUDA device it is on; -1: host memory
    std::string poisoned;             // the first failure that wrote it
  };
  // A buffer's bytes where the CPU may work on them: the buffer itself in
  // host memory; for device memory a copy, loaded if asked, written back by
  // store() (staging.cpp).
  class Host {
   public:
    Host(Worker& w, Buf& b, bool load);
    std::byte* data();
    void store();
    // fn(bytes) on `b` where the CPU may touch it, stored back after.
    template <class F>
    static void update(Worker& w, Buf& b, bool load, F&& fn) {
      Host h(w, b, load);
      fn(h.data());
      h.store();
    }

   private:
    Worker& w_;
    Buf& b_;
    std::vector<std::byte> copy_;
  };
  // A transfer in flight: the stream goes on, and a later operation that
  // touches its buffer waits for it first.
  struct InFlight {
    std::uint64_t seq = 0;
    std::uint64_t buffer = 0;
    bool writes = false;  // a receive into the buffer
    int peer = 0;         // whom it moves data with
    std::string what;     // "copy #4 from worker 1"
    transport::RequestPtr request;
    std::unique_ptr<std::uint64_t> ready;  // a large write's "ready" message
    transport::RequestPtr ready_send;
    std::uint64_t transfer = 0;             // a copy's number
    std::unique_ptr<wire::CopyWhy> why;     // a poisoned copy's cause, sent or received
    transport::RequestPtr why_send;
    std::vector<std::byte> bounce;  // a device buffer's bytes, through host memory
    bool to_device = false;         // copy `bounce` into the buffer once received
  };
  struct Outgoing {
    std::unique_ptr<wire::CompletionsHeader> header;
    std::vector<std::byte> body;
    transport::RequestPtr header_send, body_send;
  };

  void execute(const wire::Command& c, const std::vector<std::byte>& body);
  void run_command(const wire::Command& c, const std::vector<std::byte>& body, double& value,
                   bool& later);
  void collective(const wire::Command& c);
  Buf& use(std::uint64_t id);  // after its transfers; throws if unknown or poisoned
  // Finishes the transfers `which` picks (waiting for them), each a record.
  void finish_transfers(const std::function<bool(const InFlight&)>& which);
  void settle(std::uint64_t id) {  // the transfers on buffer `id`
    finish_transfers([id](const InFlight& f) { return f.buffer == id; });
  }
  void reap(bool all);  // those already finished (all: every one)
  void poison(std::uint64_t id, const std::string& cause);  // unless it is already
  void finish_transfer(InFlight& f);
  void record(std::uint64_t seq, bool failed, const std::string& message, double value = 0);
  void flush();
  void poison_outputs(const wire::Command& c, const std::vector<std::byte>& body,
                      const std::string& cause);
  std::string describe(const wire::Command& c) const;
  // Device memory (staging.cpp): allocation, and copies to and from it.
  std::shared_ptr<std::byte> allocate(std::size_t bytes, int device);
  void download(const Buf& b, void* host);
  void upload(Buf& b, const void* host);

  std::shared_ptr<transport::Transport> t_;
  ProcessGroup workers_;
  const Kernels& kernels_;
  Options options_;
  int rank_;
  std::string me_;  // "worker 2 (rank 2 on 10.0.0.5)"
  std::map<std::uint64_t, Buf> buffers_;
  std::size_t held_bytes_ = 0;
  std::deque<InFlight> in_flight_;
  std::vector<wire::Record> records_;
  std::vector<std::string> messages_;
  std::chrono::steady_clock::time_point first_unsent_;
  std::deque<Outgoing> outgoing_;
  std::shared_ptr<device::EnginePool> engines_ = std::make_shared<device::EnginePool>();
};

// A copy's data from a poisoned buffer: no bytes, and this fingerprint.
inline constexpr std::uint64_t kPoisonedCopy = 0x706f69736f6e6564ull;

// An operation that used a poisoned buffer: its outputs take the first
// cause as theirs.
struct Poisoned : Error {
  Poisoned(std::uint64_t id, std::string first)
      : Error(fmt::format("buffer #{} is poisoned by an earlier failure: {}", id, first)),
        cause(std::move(first)) {}
  std::string cause;
};

}  // namespace collie::mw

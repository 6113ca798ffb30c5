// Runs a collective on a process group with inputs every rank computes from
// (rank, index), and compares every element of the result with a reference
// computed here, independently of collie's kernels and schedules (in int64
// or double, in rank order). Used by `collie bench` (-c), the in-process
// tests and the multi-process test worker.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <collie/process_group.hpp>

namespace collie::check {

struct CollectiveCase {
  Collective collective = Collective::AllReduce;
  Algorithm algorithm = Algorithm::Auto;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  std::size_t count = 0;  // per rank, as the collective counts it
  int root = 0;
  bool in_place = false;  // the in-place form, where there is one
  bool async = false;     // through *_async and Work::wait() (in-place forms only)
  // Where the buffers are: on the DeviceMemory given to PreparedCase, or
  // in host memory (a call may mix them).
  bool input_on_device = false;
  bool output_on_device = false;
};

// Memory the CPU does not address (CUDA's, or the tests' stand-in), for
// cases whose buffers are on a device: filled and read by explicit copies.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* device, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* device, std::size_t bytes) = 0;
};

// CUDA device memory on `device` (collie::cuda::DeviceBuffer).
std::unique_ptr<DeviceMemory> cuda_memory(int device = 0);

// "all_reduce ring float32 sum count 1009 root 0 out-of-place"
std::string describe(const CollectiveCase& c);

// Whether `c` has an in-place form (all_reduce, reduce: the result replaces
// the input; broadcast has only one buffer and counts as in-place), and an
// out-of-place one (every collective but broadcast).
bool has_in_place_form(Collective c);
bool has_out_of_place_form(Collective c);

// One case's buffers on one rank: filled with the case's inputs, run as often
// as the caller likes, refilled, and checked against the reference after
// exactly one run since the last fill.
class PreparedCase {
 public:
  // `device` holds the buffers the case puts on a device (it must outlive
  // this; null: every buffer is host memory).
  PreparedCase(ProcessGroup& pg, const CollectiveCase& c, DeviceMemory* device = nullptr);
  ~PreparedCase();
  PreparedCase(const PreparedCase&) = delete;
  PreparedCase& operator=(const PreparedCase&) = delete;

  // One call of the collective: blocking, or (c.async) through *_async and
  // Work::wait().
  void run();
  // Inputs and outputs as they were before the first run.
  void refill();
  // The number of wrong elements on this rank (outputs against the
  // reference, and inputs that must come back unchanged); `first` says what
  // the first one was.
  std::size_t check(std::string& first) const;
  // Changes the first element of this rank's result (if it has one), so
  // that tests can see check() and its callers report it.
  void spoil();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// PreparedCase, run once, check.
std::size_t run_and_check(ProcessGroup& pg, const CollectiveCase& c, std::string& first,
                          DeviceMemory* device = nullptr);

// Every case of the matrix for a world of `world` ranks: every collective x
// algorithm x dtype x op at a count that spans several segments, then edge
// counts (0, 1, fewer than the ranks), every root, in-place forms and async.
// `full` false: one dtype and op per algorithm (for the sanitizer builds).
std::vector<CollectiveCase> matrix(int world, bool full);

}  // namespace collie::check

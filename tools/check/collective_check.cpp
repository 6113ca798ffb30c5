// The collective checker: every case run and every element compared with
// a reference computed independently (collective_check.hpp).
#include "collective_check.hpp"

#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::check {

struct PreparedCase::Impl {
  virtual ~Impl() = default;
  virtual void run() = 0;
  virtual void refill() = 0;
  virtual std::size_t check(std::string& first) const = 0;
  virtual void spoil() = 0;
};

namespace {

template <class T>
class Typed final : public PreparedCase::Impl {
 public:
  Typed(ProcessGroup& pg, const CollectiveCase& c, DeviceMemory* device)
      : pg_(pg), c_(c), n_(pg.size()), me_(pg.rank()), root_(pg.rank() == c.root), device_(device) {
    options_.algorithm = c.algorithm;
    // The buffers the collective's extents give this rank (a side it
    // ignores is left empty); broadcast's one buffer is the output, and an
    // in-place all_reduce or reduce has its input alone.
    const auto ext =
        collectives::extents(c.collective, n_, c.count, me_, c.root);
    std::size_t in = ext.input.value_or(0), out = ext.output.value_or(0);
    if (c.collective == Collective::Broadcast) in = 0;
    if (result_in_input()) out = 0;
    input_.resize(in);
    output_.resize(out);
    if (device_ != nullptr && c.input_on_device) dev_in_ = device_->allocate(in * sizeof(T));
    if (device_ != nullptr && c.output_on_device) dev_out_ = device_->allocate(out * sizeof(T));
    refill();
  }

  ~Typed() override {
    if (dev_in_ != nullptr) device_->release(dev_in_);
    if (dev_out_ != nullptr) device_->release(dev_out_);
  }
  Typed(const Typed&) = delete;
  Typed& operator=(const Typed&) = delete;

  void refill() override {
    for (std::size_t i = 0; i < input_.size(); ++i)
      input_[i] = to<T>(value(c_, me_, i));
    if (c_.collective == Collective::Broadcast && root_) {
      for (std::size_t i = 0; i < output_.size(); ++i)
        output_[i] = to<T>(value(c_, me_, i));
    } else {
      std::fill(output_.begin(), output_.end(), to<T>(99));
      if constexpr (std::is_same_v<T, bool>) {
        // bool has no value apart: every result element starts as the
        // opposite of what it must become, so one left unwritten shows.
        if (!result_in_input()) {
          for (std::size_t i = 0; i < std::min(result_count(), output_.size()); ++i)
            output_[i] = reference(i) == 0;
        }
      }
    }
    if (dev_in_ != nullptr) device_->upload(dev_in_, input_.data(), input_.size() * sizeof(T));
    if (dev_out_ != nullptr) device_->upload(dev_out_, output_.data(), output_.size() * sizeof(T));
  }

  void run() override {
    // In-place forms pass the input as the output: on the input's memory.
    std::span<T> in = dev_in_ != nullptr ? std::span<T>(static_cast<T*>(dev_in_), input_.size())
                                         : std::span<T>(input_);
    std::span<T> out = dev_out_ != nullptr ? std::span<T>(static_cast<T*>(dev_out_), output_.size())
                                           : std::span<T>(output_);
    std::span<const T> cin(in);
    const auto& o = options_;
    const bool async = c_.async;
    const bool in_place = c_.in_place;
    Work w;
// One typed call, blocking or through its *_async twin (the same
// arguments), as the case says.
#define COLLIE_CHECK_CALL(name, ...) \
  (async ? pg_.name##_async(__VA_ARGS__) : (pg_.name(__VA_ARGS__), Work()))
    switch (c_.collective) {
      case Collective::Broadcast:
        w = COLLIE_CHECK_CALL(broadcast, out, c_.root, o);
        break;
      case Collective::AllReduce:
        w = in_place ? COLLIE_CHECK_CALL(all_reduce, in, c_.op, o)
                     : COLLIE_CHECK_CALL(all_reduce, cin, out, c_.op, o);
        break;
      case Collective::Reduce:
        w = in_place ? COLLIE_CHECK_CALL(reduce, in, c_.root, c_.op, o)
                     : COLLIE_CHECK_CALL(reduce, cin, out, c_.root, c_.op, o);
        break;
      case Collective::ReduceScatter:
        w = COLLIE_CHECK_CALL(reduce_scatter, cin, out, c_.op, o);
        break;
      case Collective::AllGather:
        w = COLLIE_CHECK_CALL(all_gather, cin, out, o);
        break;
      case Collective::Gather:
        w = COLLIE_CHECK_CALL(gather, cin, out, c_.root, o);
        break;
      case Collective::Scatter:
        w = COLLIE_CHECK_CALL(scatter, cin, out, c_.root, o);
        break;
      case Collective::AllToAll:
        w = COLLIE_CHECK_CALL(all_to_all, cin, out, o);
        break;
      case Collective::Barrier:
        w = COLLIE_CHECK_CALL(barrier, o);
        break;
    }
#undef COLLIE_CHECK_CALL
    w.wait();
  }

  void spoil() override {
    from_device();
    auto& got = result_in_input() ? input_ : output_;
    if (result_count() > 0)
      got[0] = to<T>(std::is_same_v<T, bool> ? 1 - from(got[0]) : from(got[0]) + 1);
  }

  std::size_t check(std::string& first) const override {
    from_device();
    const auto& got = result_in_input() ? input_ : output_;
    std::size_t wrong = 0;
    auto bad = [&](std::string what) {
      if (wrong++ == 0) first = std::move(what);
    };
    const std::size_t results = result_count();
    for (std::size_t i = 0; i < results; ++i) {
      const double want = reference(i);
      const double g = from(got[i]);
      if (!(std::fabs(g - want) <= tolerance(c_, want, n_)))
        bad(fmt::format("rank {}: element {} is {}, expected {}", me_, i, g, want));
    }
    // An input that is not where the result goes must come back as it was.
    if (!result_in_input() || (c_.collective == Collective::Reduce && !root_)) {
      for (std::size_t i = 0; i < input_.size(); ++i) {
        if (from(input_[i]) != from(to<T>(value(c_, me_, i)))) {
          bad(fmt::format("rank {}: input element {} changed", me_, i));
          break;
        }
      }
    }
    return wrong;
  }

 private:
  // The device buffers' contents into the host mirrors (spoil() writes
  // the mirror back).
  void from_device() const {
    if (dev_in_ != nullptr) device_->download(input_.data(), dev_in_, input_.size() * sizeof(T));
    if (dev_out_ != nullptr)
      device_->download(output_.data(), dev_out_, output_.size() * sizeof(T));
  }

  // How many elements of this rank's result the reference covers (0: this
  // rank has no result, e.g. a reduce's non-root).
  std::size_t result_count() const {
    if (c_.collective == Collective::Reduce && !root_) return 0;
    return result_in_input() ? input_.size() : output_.size();
  }

  // The in-place all_reduce and reduce leave their result in the input.
  bool result_in_input() const {
    return c_.in_place &&
           (c_.collective == Collective::AllReduce || c_.collective == Collective::Reduce);
  }

  // The reference for element i of this rank's result.
  double reference(std::size_t i) const {
    const std::size_t k = c_.count;
    const auto mine = static_cast<std::size_t>(me_) * k;
    switch (c_.collective) {
      case Collective::Broadcast:
        return from(to<T>(value(c_, c_.root, i)));
      case Collective::AllReduce:
      case Collective::Reduce:
        return combine(c_, n_, [&](int r) { return value(c_, r, i); });
      case Collective::ReduceScatter:
        return combine(c_, n_, [&](int r) { return value(c_, r, mine + i); });
      case Collective::AllGather:
      case Collective::Gather:
        return from(to<T>(value(c_, static_cast<int>(i / k), i % k)));
      case Collective::Scatter:
        return from(to<T>(value(c_, c_.root, mine + i)));
      case Collective::AllToAll:
        return from(to<T>(value(c_, static_cast<int>(i / k), mine + i % k)));
      case Collective::Barrier:
        break;
    }
    return 0;
  }

  ProcessGroup& pg_;
  CollectiveCase c_;
  int n_;
  int me_;
  bool root_;
  CollectiveOptions options_;
  DeviceMemory* device_;
  void* dev_in_ = nullptr;  // the device buffers, where the case has them
  void* dev_out_ = nullptr;
  // The host buffers, or the host mirrors of the device ones.
  mutable Array<T> input_, output_;
};

std::unique_ptr<PreparedCase::Impl> make_typed(ProcessGroup& pg, const CollectiveCase& c,
                                               DeviceMemory* d) {
  return visit_dtype(c.dtype, [&](auto t) -> std::unique_ptr<PreparedCase::Impl> {
    return std::make_unique<Typed<decltype(t)>>(pg, c, d);
  });
}

}  // namespace

PreparedCase::PreparedCase(ProcessGroup& pg, const CollectiveCase& c, DeviceMemory* device)
    : impl_(make_typed(pg, c, device)) {
  if (device == nullptr && (c.input_on_device || c.output_on_device))
    throw Error("a case with buffers on a device needs the device's memory");
}
PreparedCase::~PreparedCase() = default;
void PreparedCase::run() {
  impl_->run();
}
void PreparedCase::refill() {
  impl_->refill();
}
std::size_t PreparedCase::check(std::string& first) const {
  return impl_->check(first);
}
void PreparedCase::spoil() {
  impl_->spoil();
}

bool has_in_place_form(Collective c) {
  return c == Collective::AllReduce || c == Collective::Reduce || c == Collective::Broadcast;
}

bool has_out_of_place_form(Collective c) {
  return c != Collective::Broadcast;
}

std::string describe(const CollectiveCase& c) {
  return fmt::format(
      "{} {} {} {} count {} root {} {}{}{}{}", collectives::collective_name(c.collective),
      collectives::algorithm_name(c.algorithm), dtype_name(c.dtype), reduce_op_name(c.op), c.count,
      c.root, c.in_place ? "in-place" : "out-of-place", c.async ? " async" : "",
      c.input_on_device ? " input-on-device" : "", c.output_on_device ? " output-on-device" : "");
}

std::size_t run_and_check(ProcessGroup& pg, const CollectiveCase& c, std::string& first,
                          DeviceMemory* device) {
  PreparedCase prepared(pg, c, device);
  prepared.run();
  return prepared.check(first);
}

}  // namespace collie::check

namespace collie::check {
namespace {

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(int device) : device_(device) {}
  void* allocate(std::size_t bytes) override {
    cuda::DeviceBuffer b(bytes, device_);
    void* p = b.data();
    buffers_.push_back(std::move(b));
    return p;
  }
  void release(void* p) override {
    std::erase_if(buffers_, [p](const cuda::DeviceBuffer& b) { return b.data() == p; });
  }
  void upload(void* device, const void* host, std::size_t bytes) override {
    find(device).upload(host, bytes, offset(device));
  }
  void download(void* host, const void* device, std::size_t bytes) override {
    find(device).download(host, bytes, offset(device));
  }

 private:
  cuda::DeviceBuffer& find(const void* p) {
    for (auto& b : buffers_)
      if (p >= b.data() &&
          p < static_cast<const std::byte*>(b.data()) + std::max<std::size_t>(b.size(), 1))
        return b;
    throw Error("not device memory of this check");
  }
  std::size_t offset(const void* p) {
    return static_cast<std::size_t>(static_cast<const std::byte*>(p) -
                                    static_cast<const std::byte*>(find(p).data()));
  }
  int device_;
  std::vector<cuda::DeviceBuffer> buffers_;
};

}  // namespace

std::unique_ptr<DeviceMemory> cuda_memory(int device) {
  return std::make_unique<CudaMemory>(device);
}

}  // namespace collie::check

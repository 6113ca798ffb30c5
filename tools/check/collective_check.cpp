// The collective checker: every case run and every element compared with
// a reference computed independently (collective_check.hpp).
#include "collective_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::check {

namespace {

bool is_float(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 ||
         t == DataType::Float64;
}
bool is_signed(DataType t) {
  return t != DataType::UInt8 && t != DataType::UInt16 && t != DataType::UInt32 &&
         t != DataType::UInt64 && t != DataType::Bool;
}

// The value rank `r` contributes at element i, as a double (exact in every dtype).
double value(const CollectiveCase& c, int r, std::size_t i) {
  const auto k = static_cast<long long>(i);
  if (c.dtype == DataType::Bool) return (r * 5 + k * 7) % 4 != 0 ? 1 : 0;  // mostly true
  switch (c.op) {
    case ReduceOp::Product:  // stays small: 1 or 2 (or 0.5, -1)
      if (is_float(c.dtype)) return (r + k) % 3 == 0 ? 2.0 : ((r + k) % 3 == 1 ? 0.5 : 1.0);
      if (is_signed(c.dtype) && (r + k) % 5 == 0) return -1;
      return (r * 3 + k) % 4 == 0 ? 2 : 1;
    case ReduceOp::BitwiseAnd:
    case ReduceOp::BitwiseOr:
    case ReduceOp::BitwiseXor:
      return static_cast<double>((r * 37 + k * 11 + 5) & 0x7f);
    default: {
      double v = static_cast<double>((r * 7 + k * 3) % 23);
      if (is_signed(c.dtype)) v -= 11;
      if (is_float(c.dtype)) v += 0.25 * static_cast<double>(k % 4);
      return v;
    }
  }
}

// The reference reduction of value_of(0), ..., value_of(n - 1) (in rank
// order), as the dtype holds it.
template <class ValueOf>
double combine(const CollectiveCase& c, int n, ValueOf value_of) {
  if (!is_float(c.dtype)) {
    // Integers: in 64 bits (exact for these small values, wrapping as the
    // dtype would for product), then narrowed modulo 2^bits.
    auto acc = static_cast<std::int64_t>(value_of(0));
    for (int r = 1; r < n; ++r) {
      const auto v = static_cast<std::int64_t>(value_of(r));
      switch (c.op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          acc += v;
          break;
        case ReduceOp::Product:
          acc = static_cast<std::int64_t>(static_cast<std::uint64_t>(acc) *
                                          static_cast<std::uint64_t>(v));
          break;
        case ReduceOp::Min:
          acc = std::min(acc, v);
          break;
        case ReduceOp::Max:
          acc = std::max(acc, v);
          break;
        case ReduceOp::BitwiseAnd:
          acc &= v;
          break;
        case ReduceOp::BitwiseOr:
          acc |= v;
          break;
        case ReduceOp::BitwiseXor:
          acc ^= v;
          break;
      }
    }
    // bool: 0 and 1 summed, multiplied, compared or combined bit by bit,
    // then any nonzero is true: or, and, and xor as bool reduces them.
    auto narrow = [&](std::int64_t x) -> double {
      switch (c.dtype) {
        case DataType::Bool:
          return x != 0 ? 1 : 0;
        case DataType::Int8:
          return static_cast<std::int8_t>(x);
        case DataType::UInt8:
          return static_cast<std::uint8_t>(x);
        case DataType::Int16:
          return static_cast<std::int16_t>(x);
        case DataType::UInt16:
          return static_cast<std::uint16_t>(x);
        case DataType::Int32:
          return static_cast<std::int32_t>(x);
        case DataType::UInt32:
          return static_cast<double>(static_cast<std::uint32_t>(x));
        case DataType::UInt64:
          return static_cast<double>(static_cast<std::uint64_t>(x));
        default:
          return static_cast<double>(x);
      }
    };
    if (c.op == ReduceOp::Avg) {
      const auto sum = static_cast<std::int64_t>(narrow(acc));
      return narrow(sum / static_cast<std::int64_t>(n));
    }
    return narrow(acc);
  }
  double acc = value_of(0);
  for (int r = 1; r < n; ++r) {
    const double v = value_of(r);
    switch (c.op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += v;
        break;
      case ReduceOp::Product:
        acc *= v;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, v);
        break;
      default:
        acc = std::max(acc, v);
        break;
    }
  }
  if (c.op == ReduceOp::Avg) acc /= static_cast<double>(n);
  return acc;
}

// How far a float result may be from the reference. The inputs are chosen so
// that float16, float32 and float64 sums, products, minima and maxima are
// exact; bfloat16 (8 significant bits) rounds partial sums, once per rank;
// averages round their division (float16 divides each contribution before
// summing, see reduce.hpp).
double tolerance(const CollectiveCase& c, double want, int world) {
  if (!is_float(c.dtype)) return 0;
  const double scale = std::max(1.0, std::fabs(want));
  if (c.dtype == DataType::BFloat16) return scale * 4e-3 * world;
  if (c.op != ReduceOp::Avg) return 0;
  switch (c.dtype) {
    case DataType::Float16:
      return scale * 1e-3 * world + 1e-3 * world;
    case DataType::Float32:
      return scale * 1e-6;
    default:
      return scale * 1e-14;
  }
}

// A contiguous array of T: std::vector, but for bool (whose std::vector
// is a bitset with no data()) an array of bool.
class BoolArray {
 public:
  void resize(std::size_t n) {
    data_ = std::make_unique<bool[]>(n);
    size_ = n;
  }
  std::size_t size() const { return size_; }
  bool* data() const { return data_.get(); }
  bool* begin() const { return data_.get(); }
  bool* end() const { return data_.get() + size_; }
  bool& operator[](std::size_t i) const { return data_[i]; }

 private:
  std::unique_ptr<bool[]> data_ = std::make_unique<bool[]>(0);
  std::size_t size_ = 0;
};
template <class T>
using Array = std::conditional_t<std::is_same_v<T, bool>, BoolArray, std::vector<T>>;

template <class T>
T to(double v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return T(static_cast<float>(v));
  else
    return static_cast<T>(v);
}
template <class T>
double from(T v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

}  // namespace

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
    const auto N = static_cast<std::size_t>(n_);
    const std::size_t k = c.count;
    std::size_t in = 0, out = 0;
    switch (c.collective) {
      case Collective::Broadcast:
        out = k;
        break;
      case Collective::AllReduce:
      case Collective::Reduce:
        in = k;
        out = c.in_place ? 0 : k;
        break;
      case Collective::ReduceScatter:
        in = N * k;
        out = k;
        break;
      case Collective::AllGather:
      case Collective::Gather:
        in = k;
        out = c.collective == Collective::Gather && !root_ ? 0 : N * k;
        break;
      case Collective::Scatter:
        in = root_ ? N * k : 0;
        out = k;
        break;
      case Collective::AllToAll:
        in = N * k;
        out = N * k;
        break;
      case Collective::Barrier:
        break;
    }
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
    Work w;
    switch (c_.collective) {
      case Collective::Broadcast:
        if (async)
          w = pg_.broadcast_async(out, c_.root, o);
        else
          pg_.broadcast(out, c_.root, o);
        break;
      case Collective::AllReduce:
        if (c_.in_place && async)
          w = pg_.all_reduce_async(in, c_.op, o);
        else if (c_.in_place)
          pg_.all_reduce(in, c_.op, o);
        else
          pg_.all_reduce(cin, out, c_.op, o);
        break;
      case Collective::Reduce:
        if (c_.in_place && async)
          w = pg_.reduce_async(in, c_.root, c_.op, o);
        else if (c_.in_place)
          pg_.reduce(in, c_.root, c_.op, o);
        else
          pg_.reduce(cin, out, c_.root, c_.op, o);
        break;
      case Collective::ReduceScatter:
        if (async)
          w = pg_.reduce_scatter_async(cin, out, c_.op, o);
        else
          pg_.reduce_scatter(cin, out, c_.op, o);
        break;
      case Collective::AllGather:
        if (async)
          w = pg_.all_gather_async(cin, out, o);
        else
          pg_.all_gather(cin, out, o);
        break;
      case Collective::Gather:
        if (async)
          w = pg_.gather_async(cin, out, c_.root, o);
        else
          pg_.gather(cin, out, c_.root, o);
        break;
      case Collective::Scatter:
        if (async)
          w = pg_.scatter_async(cin, out, c_.root, o);
        else
          pg_.scatter(cin, out, c_.root, o);
        break;
      case Collective::AllToAll:
        if (async)
          w = pg_.all_to_all_async(cin, out, o);
        else
          pg_.all_to_all(cin, out, o);
        break;
      case Collective::Barrier:
        if (async)
          w = pg_.barrier_async(o);
        else
          pg_.barrier(o);
        break;
    }
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
  switch (c.dtype) {
    case DataType::Int8:
      return std::make_unique<Typed<std::int8_t>>(pg, c, d);
    case DataType::UInt8:
      return std::make_unique<Typed<std::uint8_t>>(pg, c, d);
    case DataType::Int32:
      return std::make_unique<Typed<std::int32_t>>(pg, c, d);
    case DataType::Int64:
      return std::make_unique<Typed<std::int64_t>>(pg, c, d);
    case DataType::Float16:
      return std::make_unique<Typed<float16>>(pg, c, d);
    case DataType::BFloat16:
      return std::make_unique<Typed<bfloat16>>(pg, c, d);
    case DataType::Float32:
      return std::make_unique<Typed<float>>(pg, c, d);
    case DataType::Float64:
      return std::make_unique<Typed<double>>(pg, c, d);
    case DataType::Int16:
      return std::make_unique<Typed<std::int16_t>>(pg, c, d);
    case DataType::UInt16:
      return std::make_unique<Typed<std::uint16_t>>(pg, c, d);
    case DataType::UInt32:
      return std::make_unique<Typed<std::uint32_t>>(pg, c, d);
    case DataType::UInt64:
      return std::make_unique<Typed<std::uint64_t>>(pg, c, d);
    case DataType::Bool:
      return std::make_unique<Typed<bool>>(pg, c, d);
  }
  throw Error("unknown dtype");
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

std::vector<CollectiveCase> matrix(int world, bool full) {
  std::vector<CollectiveCase> cases;
  const std::size_t big = 1009;  // a prime: uneven chunks; several segments of 1 KiB
  for (auto coll : collectives::kCollectives) {
    for (auto algo : collectives::algorithms_for(coll)) {
      CollectiveCase base;
      base.collective = coll;
      base.algorithm = algo;
      base.root = world - 1;
      // Every dtype, and every op it supports.
      for (auto t : kDataTypes) {
        if (!full && t != DataType::Float32 && t != DataType::Int32) continue;
        for (auto op : kReduceOps) {
          if (!collectives::reduces(coll) && op != ReduceOp::Sum) continue;
          if (!supports(t, op)) continue;
          if (!full && op != ReduceOp::Sum && !(op == ReduceOp::Avg && t == DataType::Float32))
            continue;
          auto c = base;
          c.dtype = t;
          c.op = op;
          c.count = coll == Collective::Barrier ? 1 : big;
          cases.push_back(c);
        }
      }
      if (coll == Collective::Barrier) continue;
      // Edge counts; in-place; async; every root.
      for (std::size_t count :
           {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(world - 1)}) {
        auto c = base;
        c.count = count;
        cases.push_back(c);
      }
      auto inplace = base;
      inplace.count = 17;
      inplace.in_place = true;
      if (coll == Collective::AllReduce || coll == Collective::Reduce) cases.push_back(inplace);
      auto async = base;
      async.count = 33;
      async.async = true;
      async.in_place = coll == Collective::AllReduce || coll == Collective::Reduce;
      cases.push_back(async);
      if (collectives::has_root(coll)) {
        for (int root = 0; root < world; ++root) {
          auto c = base;
          c.root = root;
          c.count = static_cast<std::size_t>(world) + 2;
          c.in_place = coll == Collective::Reduce;
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
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

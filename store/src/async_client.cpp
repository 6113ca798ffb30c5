// The asynchronous store client's operations (async_client.hpp): each one
// a request encoded and its reply decoded for the caller's handler; the
// connection under them is client_connection.hpp's.
#include <collie/store/async_client.hpp>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "client_connection.hpp"
#include "sealed_channel.hpp"

namespace collie::store {

void Failure::raise() const {
  switch (kind) {
    case Kind::Connection:
      throw ConnectionError(message);
    case Kind::Authentication:
      throw AuthenticationError(message);
    case Kind::Protocol:
      throw ProtocolError(message);
    case Kind::Request:
      throw RequestError(message);
    case Kind::TimedOut:
      throw TimeoutError(message);
  }
  throw Error(message);
}

// --- the public operations ----------------------------------------------------------

namespace {

wire::Request make(wire::Op op, std::initializer_list<std::string_view> keys = {},
                   std::initializer_list<std::string_view> values = {}) {
  wire::Request request;
  request.op = op;
  request.keys.assign(keys.begin(), keys.end());
  request.values.assign(values.begin(), values.end());
  return request;
}

// Wraps a typed handler into a Decoder that reads the reply with `read`.
template <class T, class Read>
Decoder decode(AsyncStoreClient::Handler<T> done, Read read) {
  return [done = std::move(done), read = std::move(read)](const Failure* failure,
                                                          wire::Reader* reader) {
    if (failure != nullptr) return done(failure, T{});
    done(nullptr, read(*reader));
  };
}

Decoder decode_done(AsyncStoreClient::Handler<Done> done) {
  return decode(std::move(done), [](wire::Reader&) { return Done{}; });
}

}  // namespace

AsyncStoreClient::AsyncStoreClient(asio::io_context& io, ClientOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

AsyncStoreClient::~AsyncStoreClient() {
  if (impl_) impl_->close();
}

AsyncStoreClient::AsyncStoreClient(AsyncStoreClient&&) noexcept = default;
AsyncStoreClient& AsyncStoreClient::operator=(AsyncStoreClient&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void AsyncStoreClient::connect(std::string host, std::uint16_t port, Handler<Done> done) {
  impl_->connect(std::move(host), port, std::move(done));
}

AsyncStoreClient::RequestId AsyncStoreClient::set(std::string_view key, std::string_view value,
                                                  Handler<Done> done) {
  auto request = make(wire::Op::Set, {key}, {value});
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::get(std::string_view key, Handler<std::string> done) {
  auto request = make(wire::Op::Get, {key});
  return impl_->send(
      request, decode(std::move(done), [](wire::Reader& r) { return std::string(r.bytes()); }));
}

AsyncStoreClient::RequestId AsyncStoreClient::try_get(std::string_view key,
                                                      Handler<std::optional<std::string>> done) {
  auto request = make(wire::Op::TryGet, {key});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) {
                       std::optional<std::string> value;
                       if (r.u8() != 0) value.emplace(r.bytes());
                       return value;
                     }));
}

AsyncStoreClient::RequestId AsyncStoreClient::add(std::string_view key, std::int64_t delta,
                                                  Handler<std::int64_t> done) {
  auto request = make(wire::Op::Add, {key});
  request.delta = delta;
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) { return r.i64(); }));
}

AsyncStoreClient::RequestId AsyncStoreClient::compare_set(std::string_view key,
                                                          std::string_view expected,
                                                          std::string_view desired,
                                                          Handler<CompareSetResult> done) {
  auto request = make(wire::Op::CompareSet, {key}, {expected, desired});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) {
                       CompareSetResult result;
                       result.swapped = r.u8() != 0;
                       const bool exists = r.u8() != 0;
                       const auto value = r.bytes();
                       if (exists) result.current.emplace(value);
                       return result;
                     }));
}

namespace {
wire::Request key_list(wire::Op op, std::span<const std::string> keys) {
  wire::Request request;
  request.op = op;
  request.keys.assign(keys.begin(), keys.end());
  return request;
}
}  // namespace

AsyncStoreClient::RequestId AsyncStoreClient::wait(std::span<const std::string> keys,
                                                   Handler<Done> done) {
  auto request = key_list(wire::Op::Wait, keys);
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::check(std::span<const std::string> keys,
                                                    Handler<bool> done) {
  auto request = key_list(wire::Op::Check, keys);
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) { return r.u8() != 0; }));
}

AsyncStoreClient::RequestId AsyncStoreClient::delete_key(std::string_view key, Handler<bool> done) {
  auto request = make(wire::Op::Delete, {key});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) { return r.u8() != 0; }));
}

AsyncStoreClient::RequestId AsyncStoreClient::count_keys(std::string_view prefix,
                                                         Handler<std::int64_t> done) {
  auto request = make(wire::Op::CountKeys, {prefix});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) { return r.i64(); }));
}

AsyncStoreClient::RequestId AsyncStoreClient::list_keys(
    std::string_view prefix, Handler<std::pair<std::vector<std::string>, bool>> done) {
  auto request = make(wire::Op::ListKeys, {prefix});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) {
                       const bool truncated = r.u8() != 0;
                       const std::uint32_t n = r.u32();
                       std::vector<std::string> keys;
                       for (std::uint32_t i = 0; i < n && r.ok(); ++i)
                         keys.emplace_back(r.bytes());
                       return std::make_pair(std::move(keys), truncated);
                     }));
}

AsyncStoreClient::RequestId AsyncStoreClient::multi_get(std::span<const std::string> keys,
                                                        Handler<std::vector<std::string>> done) {
  auto request = key_list(wire::Op::MultiGet, keys);
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) {
                       const std::uint32_t n = r.u32();
                       std::vector<std::string> values;
                       for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
                         values.emplace_back(r.bytes());
                       }
                       return values;
                     }));
}

AsyncStoreClient::RequestId AsyncStoreClient::multi_set(std::span<const std::string> keys,
                                                        std::span<const std::string> values,
                                                        Handler<Done> done) {
  if (keys.size() != values.size()) {
    throw ArgumentError(fmt::format("store multi_set: {} keys but {} values; they must pair up",
                                    keys.size(), values.size()));
  }
  auto request = key_list(wire::Op::MultiSet, keys);
  request.values.assign(values.begin(), values.end());
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::append(std::string_view key, std::string_view value,
                                                     Handler<Done> done) {
  auto request = make(wire::Op::Append, {key}, {value});
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::barrier(std::string_view name, std::uint32_t n,
                                                      Handler<Done> done) {
  auto request = make(wire::Op::Barrier, {name});
  request.number = n;
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::ping(Handler<Done> done) {
  auto request = make(wire::Op::Ping);
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::torch(Handler<Done> done) {
  auto request = make(wire::Op::Torch);
  return impl_->send(request, decode_done(std::move(done)));
}

int AsyncStoreClient::duplicate_socket() const {
  return impl_->duplicate_socket();
}

std::unique_ptr<SealedChannel> AsyncStoreClient::release_sealed() const {
  return impl_->release_sealed();
}

void AsyncStoreClient::abandon(RequestId id) {
  impl_->abandon(id);
}
void AsyncStoreClient::close() {
  impl_->close();
}
const std::string& AsyncStoreClient::address() const {
  return impl_->address();
}
const StoreLimits& AsyncStoreClient::limits() const {
  return impl_->limits();
}
const ClientOptions& AsyncStoreClient::options() const {
  return impl_->options();
}

}  // namespace collie::store

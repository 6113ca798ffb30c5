// The asynchronous store client: one TCP connection to a StoreServer, driven
// by a caller-owned asio::io_context. Many of them can share one io_context
// (collie bench store runs thousands in one thread); StoreClient wraps one
// in a blocking API with timeouts.
//
// Every operation encodes its request at once (its string arguments need
// not outlive the call) and calls its handler later, from the io_context,
// with either a Failure or the result. Handlers are never called from inside
// the initiating function.
//
// There is no per-operation timer: a caller that stops waiting calls
// abandon(id), which drops the handler and, for a blocking operation, tells
// the server to forget the request. A reply that arrives for an abandoned
// request is discarded, so the connection stays usable.
//
// Not thread-safe: use an object only from the thread(s) running its
// io_context, one at a time (an implicit or explicit strand).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <asio/io_context.hpp>

#include <collie/store/client_options.hpp>
#include <collie/store/store.hpp>

namespace collie::store {

// Why an operation failed. raise() throws the matching collie exception.
struct Failure {
  enum class Kind { Connection, Authentication, Protocol, Request, TimedOut };
  Kind kind;
  std::string message;
  [[noreturn]] void raise() const;
};

// The result of an operation that returns nothing.
struct Done {};

class SealedChannel;  // a sealed connection's records (store/src/sealed_channel.hpp)

class AsyncStoreClient {
 public:
  using RequestId = std::uint32_t;
  template <class T>
  using Handler = std::function<void(const Failure*, T)>;

  AsyncStoreClient(asio::io_context& io, ClientOptions options = {});
  // Closes the connection (see close()).
  ~AsyncStoreClient();
  AsyncStoreClient(AsyncStoreClient&&) noexcept;
  AsyncStoreClient& operator=(AsyncStoreClient&&) noexcept;

  // Connects, retrying with exponential backoff and jitter until
  // options.connect_timeout, then runs the handshake (version check and,
  // with a token, mutual authentication). Call once, before any operation.
  void connect(std::string host, std::uint16_t port, Handler<Done> done);

  // The operations of collie::store::Store; see store.hpp for their meaning.
  RequestId set(std::string_view key, std::string_view value, Handler<Done> done);
  RequestId get(std::string_view key, Handler<std::string> done);
  RequestId try_get(std::string_view key, Handler<std::optional<std::string>> done);
  RequestId add(std::string_view key, std::int64_t delta, Handler<std::int64_t> done);
  RequestId compare_set(std::string_view key, std::string_view expected, std::string_view desired,
                        Handler<CompareSetResult> done);
  RequestId wait(std::span<const std::string> keys, Handler<Done> done);
  RequestId check(std::span<const std::string> keys, Handler<bool> done);
  RequestId delete_key(std::string_view key, Handler<bool> done);
  RequestId count_keys(std::string_view prefix, Handler<std::int64_t> done);
  // The second value is true when the server cut the list at its limits.
  RequestId list_keys(std::string_view prefix,
                      Handler<std::pair<std::vector<std::string>, bool>> done);
  RequestId multi_get(std::span<const std::string> keys, Handler<std::vector<std::string>> done);
  RequestId multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                      Handler<Done> done);
  RequestId append(std::string_view key, std::string_view value, Handler<Done> done);
  RequestId barrier(std::string_view name, std::uint32_t n, Handler<Done> done);
  RequestId ping(Handler<Done> done);
  // Asks the server to take the rest of this connection as a torch
  // TCPStore client's (StoreClient::into_torch_tunnel); no other request
  // may follow.
  RequestId torch(Handler<Done> done);
  // A duplicate of the connection's socket, which the caller owns (-1 when
  // not connected): after torch(), the tunnel; close() this client then.
  int duplicate_socket() const;
  // After torch(), on a sealed connection: its channel, which the tunnel's
  // bytes go through from then on; null on a clear one.
  std::unique_ptr<SealedChannel> release_sealed() const;

  // Stops waiting for request `id`: its handler is dropped, never called.
  // A blocked request (get, wait, multi_get, barrier) is cancelled on the server.
  void abandon(RequestId id);

  // Closes the connection. Pending handlers are called, later, from the
  // io_context, with a Connection failure.
  void close();

  // "host:port" as given to connect().
  const std::string& address() const;
  // The limits the server announced (defaults before the handshake).
  const StoreLimits& limits() const;
  const ClientOptions& options() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;  // shared with its own pending asynchronous operations
};

}  // namespace collie::store

// StoreClient: the blocking TCP client of a StoreServer.
//
//   collie::store::StoreClient store("10.0.0.1", 29500);   // retries until the server is up
//   store.set("addr/3", "10.0.0.4:41234");
//   std::string peer = store.get("addr/0", std::chrono::seconds(30));
//
// Every call blocks until the server answers, the call's timeout runs out
// (TimeoutError; the client stays usable), or the connection breaks
// (ConnectionError; the client is unusable from then on). Errors name the
// store's address, the operation and its key.
//
// Thread-safe: calls from several threads are serialized, one request on the
// wire at a time. A thread blocked in get() holds the client until it
// returns; give each thread its own client if they must wait independently.
#pragma once

#include <memory>
#include <string>

#include <collie/store/client_options.hpp>
#include <collie/store/store.hpp>

namespace collie::store {

class SealedChannel;  // a sealed connection's records (store/src/sealed_channel.hpp)

// A torch client's tunnel (StoreClient::into_torch_tunnel): the socket, which
// its holder closes, and, where the connection is sealed, the channel that
// every byte written to or read from it goes through (null where clear).
struct TorchTunnel {
  TorchTunnel();
  TorchTunnel(TorchTunnel&&) noexcept;
  TorchTunnel& operator=(TorchTunnel&&) noexcept;
  ~TorchTunnel();
  int fd = -1;
  std::unique_ptr<SealedChannel> sealed;
};

class StoreClient final : public Store {
 public:
  // Connects to the server at host:port, retrying with exponential backoff
  // and jitter while it is not up yet, for up to options.connect_timeout.
  // Throws ConnectionError naming host:port and how long it tried,
  // AuthenticationError, or ProtocolError.
  StoreClient(std::string host, std::uint16_t port, ClientOptions options = {});
  ~StoreClient() override;
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  // Every call of the Store interface (store.hpp), as it documents them.
  COLLIE_STORE_OVERRIDES

  // Round trip to the server; returns how long it took.
  std::chrono::nanoseconds ping(Timeout timeout = {});

  // Turns this connection into a torch TCPStore client's: the returned
  // socket (the caller owns it) carries torch's protocol to the store from
  // now on, under this client's proof of the token, as if a torch client
  // ran there; this client is closed. For relays of torch clients, which
  // cannot prove a token (collie launch on nodes other than the store's).
  // A sealed connection's bytes go through its channel (TorchTunnel).
  TorchTunnel into_torch_tunnel(Timeout timeout = {});

  // Changes the default timeout of later calls.
  void set_timeout(std::chrono::milliseconds timeout);

  // "host:port" of the server.
  const std::string& address() const;

  // The limits the server announced in the handshake.
  StoreLimits limits() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collie::store

// A relay of torch's TCPStore clients to a collie store on another host.
// torch's protocol cannot prove the job's token, so a store across hosts
// must not serve it directly; the relay listens on this host's loopback,
// serves only processes of its own user there (as the store does), and
// carries each client's queries over a connection of its own that proved
// the token (StoreClient::into_torch_tunnel). A collie client (its first
// byte is collie's magic) proves the token itself: its bytes go through as
// they are. `collie launch` runs one on every node but the store's, and
// points its ranks at it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <collie/store/client_options.hpp>

namespace collie::store {

class TorchRelay {
 public:
  // Listens on 127.0.0.1 (a free port) for torch clients, and carries
  // them to the store at host:port with `options` (its token). Throws
  // collie::Error if it cannot listen.
  TorchRelay(std::string host, std::uint16_t port, ClientOptions options);
  // Closes every connection it carries, and gives up within about a second
  // on those it is still connecting to the store (which may be gone: a
  // launcher's next round has a store elsewhere).
  ~TorchRelay();
  TorchRelay(const TorchRelay&) = delete;
  TorchRelay& operator=(const TorchRelay&) = delete;

  std::uint16_t port() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collie::store

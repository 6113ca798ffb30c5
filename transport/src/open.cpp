// open_transport(): every rank's host, and a backend for each peer
// (open.hpp).
#include <collie/transport/open.hpp>

#include <algorithm>

#include <fmt/format.h>

#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/transport/keys.hpp>
#include <collie/transport/peer_router.hpp>
#include <collie/transport/shm.hpp>
#include <collie/transport/tcp.hpp>

namespace collie::transport {

namespace {

// Every rank's host identity, waiting for ranks that have not published it.
std::vector<std::string> host_identities(store::Store& store, const TransportOptions& o) {
  constexpr std::size_t kBatch = 4096;  // the store's limit per multi_get
  std::vector<std::string> all;
  all.reserve(static_cast<std::size_t>(o.world_size));
  for (int first = 0; first < o.world_size; first += static_cast<int>(kBatch)) {
    std::vector<std::string> names;
    const int last = std::min(o.world_size, first + static_cast<int>(kBatch));
    for (int r = first; r < last; ++r)
      names.push_back(keys::host(o.group, r));
    try {
      store.wait(names, o.timeout);
    } catch (const TimeoutError&) {
      std::vector<int> missing;
      for (int r = first; r < last && missing.size() < 8; ++r) {
        const std::string key = keys::host(o.group, r);
        if (!store.check(std::span(&key, 1))) missing.push_back(r);
      }
      throw TimeoutError(fmt::format(
          "rank {}: ranks {}{} did not say which host they run on (store keys '{}/host/<rank>') "
          "within {}: did every rank start, with WORLD_SIZE={}?",
          o.rank, fmt::join(missing, ", "), missing.size() == 8 ? " and maybe more" : "",
          o.group, describe_duration(o.timeout), o.world_size));
    }
    auto values = store.multi_get(names);
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

}  // namespace

std::shared_ptr<Transport> open_transport(std::shared_ptr<store::Store> store,
                                          const TransportOptions& options) {
  if (options.settings.backend != "auto" && options.settings.backend != "tcp" && options.settings.backend != "shm") {
    throw ArgumentError(fmt::format(
        "rank {}: transport '{}': choose auto (shared memory between ranks of one host, TCP "
        "between hosts), tcp or shm",
        options.rank, options.settings.backend));
  }
  auto tcp = std::make_shared<TcpTransport>(store, options);
  if (options.settings.backend == "tcp" || options.world_size == 1) return tcp;
  std::string me = options.host_id.empty() ? host_identity() : options.host_id;
  if (const auto why = shared_memory_unusable(); !why.empty()) {
    if (options.settings.backend == "shm")
      throw Error(fmt::format("rank {}: the transport is shm (COLLIE_TRANSPORT), but this process "
                              "cannot share memory with its peers: {}",
                              options.rank, why));
    collie::log().info("rank {}: no shared memory ({}): every peer is reached over TCP",
                       options.rank, why);
    me += fmt::format(" (rank {} without shared memory)", options.rank);  // matches no one
  }
  store->set(keys::host(options.group, options.rank), me);
  const auto hosts = host_identities(*store, options);
  std::vector<int> local;
  for (int r = 0; r < options.world_size; ++r) {
    if (hosts[static_cast<std::size_t>(r)] == me) {
      local.push_back(r);
    } else if (options.settings.backend == "shm") {
      throw Error(fmt::format(
          "rank {}: the transport is shm (COLLIE_TRANSPORT), but rank {} runs on another host "
          "('{}', this one is '{}'): shared memory reaches only ranks of this host; use auto "
          "(TCP between hosts)",
          options.rank, r, hosts[static_cast<std::size_t>(r)], me));
    }
  }
  if (local.size() == 1) return tcp;
  auto shm = std::make_shared<ShmTransport>(store, options, local, tcp->address());
  std::vector<std::size_t> backend_of(static_cast<std::size_t>(options.world_size), 0);
  for (int r : local)
    backend_of[static_cast<std::size_t>(r)] = 1;
  return std::make_shared<PeerRouter>(std::vector<std::shared_ptr<Transport>>{tcp, shm},
                                      std::move(backend_of));
}

}  // namespace collie::transport

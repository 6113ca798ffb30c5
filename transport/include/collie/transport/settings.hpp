// What a user chooses about the transport: which backend carries messages
// between ranks of one host, how long a wait spins, how shared memory
// copies, what is sealed and how many connections carry a pair's large
// messages. One struct, under one set of names, from the environment
// (COLLIE_TRANSPORT, COLLIE_SPIN_US, COLLIE_SHM_SINGLE_COPY,
// COLLIE_SHM_STORES, COLLIE_SEAL, COLLIE_STREAMS; the runtime's
// JobConfig::transport) to the backends (TransportOptions::settings,
// transport.hpp). The defaults are the
// variables' table's (collie/environment.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include <collie/environment.hpp>

namespace collie::seal {
class Certificates;
}

namespace collie::transport {

struct TransportSettings {
  // Which backend serves which peer (open_transport(), open.hpp): "auto"
  // (shared memory between ranks of one host, TCP between hosts), "tcp"
  // (TCP for every peer) or "shm" (shared memory for every peer: all ranks
  // must share this host). Between hosts it is always TCP.
  std::string backend{environment::kTransport.fallback};
  // How long a wait polls (yielding the CPU between polls) before it
  // sleeps: 0 to 1 s.
  std::chrono::microseconds spin{
      static_cast<long long>(environment::default_number(environment::kSpinUs))};
  // Shared memory: messages of at least this many bytes are read by the
  // receiver straight from the sender's memory (process_vm_readv, one copy)
  // where the kernel permits it; 0: never, every message goes through the
  // ring (two copies, by both processes at once: faster on the machines
  // measured, docs/PERFORMANCE.md).
  std::size_t shm_single_copy_from = environment::default_bytes(environment::kShmSingleCopy);
  // Shared memory: how a sender stores messages into a ring: "auto"
  // (ordinary or non-temporal stores, whichever has been faster lately: it
  // depends on whether the two cores share a cache), "cached" or
  // "streaming" (non-temporal).
  std::string shm_stores{environment::kShmStores.fallback};
  // Which TCP connections are sealed, encrypted and authenticated
  // (docs/security.md): "auto" (those between hosts: a connection whose two
  // ends are not one address, or not loopback), "on" (every one) or "off"
  // (none). Both ends of a connection must choose alike, else it is refused.
  std::string seal{environment::kSeal.fallback};
  // Certificates (docs/security.md, "Certificates"): this host's
  // certificate, its key and the site's authorities (PEM files); when set,
  // each end of a sealed connection between ranks proves itself with its
  // certificate too. Empty: the job's secret alone.
  std::string seal_cert;
  std::string seal_key;
  std::string seal_ca;
  // TCP: the lanes (extra connections) a rank opens to a peer for its large
  // messages (tcp/lanes.hpp); 1: none, the pair's connection alone; 0
  // (COLLIE_STREAMS=auto): none until Transport::set_streams() says how
  // many (the runtime's link probe).
  int streams = 0;
};

// The certificates `settings` name (seal_cert, seal_key, seal_ca), loaded;
// null where none is named. Throws collie::Error naming a file that is
// wrong (collie/certificates.hpp).
std::shared_ptr<const seal::Certificates> load_certificates(const TransportSettings& settings);

}  // namespace collie::transport

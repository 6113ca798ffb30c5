// EtcdStore: the Store interface on an etcd cluster (v3 API), for a job's
// rendezvous that must outlive any node of the job.
//
//   collie::store::EtcdOptions o;
//   o.endpoints = {"10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"};
//   o.prefix = "/collie/job-42/";
//   o.tls = {"ca.pem", "client.pem", "client-key.pem"};
//   collie::store::EtcdStore store(o);
//   store.set("addr/3", "10.0.0.4:41234");
//
// Every key lives under `prefix` in etcd (keys under prefix + "k/",
// barriers under prefix + "b/"), so jobs sharing a cluster never meet. It
// speaks etcd's JSON gateway (/v3/...) through libcurl: TLS with a client
// certificate by default, plain HTTP only when `insecure` is set. A member
// that cannot be reached, or has no leader, is left for the next one, so
// losing a minority of the cluster goes unnoticed; a cluster without a
// quorum fails each call at its timeout with an error that says so and
// what each member answered.
//
// Atomic updates (add, compare_set, append) are etcd transactions that
// compare the key's revision; one whose reply was lost (the member died
// after taking it) is looked up by a marker key it wrote, so a failover
// never applies it twice. Blocking calls (get, wait, multi_get, barrier)
// watch: etcd pushes the change, nobody polls. The store holds one lease,
// kept alive by a thread of its own: a barrier's entrants and the markers
// are attached to it and vanish when the process dies, as the server's
// count of a disconnected client does. put_with_lease() gives the same to a
// key of the program's (a heartbeat, a node's announcement).
//
// Limits are etcd's: a request of at most 1.5 MiB (--max-request-bytes;
// values are sent in base64, so about 1.1 MiB of value), at most 128
// operations in one transaction (--max-txn-ops; multi_set of more keys is
// split, and is then atomic only per 128 keys). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <collie/store/store.hpp>

namespace collie::store {

struct EtcdTls {
  std::string cacert;  // the cluster's CA (PEM); empty: the system's
  std::string cert;    // this client's certificate (PEM)
  std::string key;     // its private key (PEM)
};

struct EtcdOptions {
  // The members, "host:port" (or "https://host:port"; "http://host:port"
  // only with insecure). At least one.
  std::vector<std::string> endpoints;
  // Where this store's keys live in etcd: "/collie/<job>/". Must end in '/'.
  std::string prefix = "/collie/default/";
  EtcdTls tls;
  // Plain HTTP, no certificates: anyone who reaches etcd reads and writes
  // the job's keys. Off by default; the store refuses http:// without it.
  bool insecure = false;
  // Default timeout of every call; also how long the constructor tries to
  // reach a member that answers.
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // The lease's time to live: how long after this process dies its
  // barrier entries and put_with_lease keys vanish. Renewed every third of it.
  std::chrono::seconds lease_ttl{10};
};

class EtcdStore final : public Store {
 public:
  // Reaches the cluster and takes a lease. Throws ArgumentError for options
  // that cannot work (no endpoint, http:// without insecure, a missing
  // certificate file), ConnectionError or TimeoutError naming the members
  // when none answers within the timeout.
  explicit EtcdStore(EtcdOptions options);
  // Revokes the lease (its keys vanish at once).
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  // Every call of the Store interface (store.hpp), as it documents them.
  COLLIE_STORE_OVERRIDES

  // set(), with the key attached to this store's lease: it vanishes within
  // lease_ttl of this process's death, or at once when the store is destroyed.
  void put_with_lease(std::string_view key, std::string_view value, Timeout timeout = {});

  // Throws the ArgumentError the constructor would for these options.
  static void check_options(const EtcdOptions& options);

  // "etcd at a:2379, b:2379 (prefix /collie/job-42/)", for messages.
  std::string describe() const;
  const EtcdOptions& options() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Parses "host:port,host:port" (or with https:// / http://) into a list;
// throws ArgumentError naming the bad part.
std::vector<std::string> parse_etcd_endpoints(std::string_view text);

}  // namespace collie::store

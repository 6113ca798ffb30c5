// A transport made of backends, each serving some peers: the peer decides.
//
//   // ranks 0 and 1 share this host: shared memory; the rest: TCP
//   PeerRouter t({tcp, shm}, {1, 1, 0, 0});
//   t.isend(1, ...);   // through shm
//   t.isend(3, ...);   // through tcp
//
// Which backend serves which peer is fixed when the group is made, and both
// ranks of a pair must choose alike (by a rule both can evaluate, such as
// "same host"). Every backend is made for the whole group (its rank and
// world size are the router's) and is used only for the peers routed to it;
// backends connect lazily, so a backend never opens anything to a peer it
// does not serve. A request is answered by the backend of its peer.
// Thread-safe as its backends are; adds one indirect call per operation.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include <collie/transport/transport.hpp>

namespace collie::transport {

class PeerRouter final : public Transport {
 public:
  // `backend_of[p]` is the index in `backends` of the one that serves peer
  // p (this rank's own included). Throws collie::ArgumentError if the
  // backends disagree on rank or world size, if `backend_of` does not have
  // one entry per rank, or if an index is out of range.
  PeerRouter(std::vector<std::shared_ptr<Transport>> backends, std::vector<std::size_t> backend_of);

  int rank() const override;
  int world_size() const override;
  RequestPtr isend(int peer, Tag tag, const void* data, std::size_t bytes,
                   std::uint64_t fingerprint = 0) override;
  RequestPtr irecv(int peer, Tag tag, void* data, std::size_t bytes) override;
  RequestPtr irecv_consume(int peer, Tag tag, std::size_t bytes, Consumer consume) override;
  void wait(const RequestPtr& request,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt) override;
  bool wait_some(const RequestPtr& request, std::chrono::milliseconds timeout) override;
  int wait_any(std::span<const RequestPtr> requests, std::chrono::milliseconds timeout) override;
  bool test(const RequestPtr& request) const override;
  std::uint64_t fingerprint(const RequestPtr& request) const override;
  std::size_t transferred(const RequestPtr& request) const override;
  // Every backend's queued messages under `tag`.
  std::vector<std::pair<int, std::uint64_t>> queued_fingerprints(Tag tag) const override;
  std::vector<std::pair<Tag, std::uint64_t>> queued_from(int peer) const override;
  bool any_queued() const override;
  ProgressClaim claim_progress() override;
  std::string failure_of(int peer) const override;
  std::string describe_peer(int peer) const override;
  std::string describe_lanes(int peer) const override;
  // Each backend with the ranks it serves: "tcp on 10.0.0.4:41234 (ranks
  // 2-7); shm (ranks 0-1)".
  std::string describe() const override;
  bool shares_memory_with(int peer) const override;
  // The board of the one backend that serves every other member, if one does.
  std::unique_ptr<Board> open_board(std::span<const int> members, std::uint32_t space) override;
  void set_host_load(int ranks, int processors) override;  // every backend's
  void set_streams(int streams) override;                   // every backend's
  void prefetch() override;

 private:
  // The backend of `peer`; check_peer()'s error, naming `op`, if there is none.
  Transport& backend(int peer, std::string_view op) const;
  // The backend that made `request`.
  Transport& answering(const RequestPtr& request) const;

  std::vector<std::shared_ptr<Transport>> backends_;
  std::vector<std::size_t> backend_of_;
};

}  // namespace collie::transport

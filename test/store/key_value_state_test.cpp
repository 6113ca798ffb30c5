// The store's data and blocked requests, driven directly (no sockets).
#include "key_value_state.hpp"

#include "support/catch.hpp"

using namespace collie::store;
using namespace collie::store::wire;

namespace {

struct Reply {
  ReplyStatus status;
  std::uint32_t id;
  std::vector<std::uint8_t> payload;
};

// Collects the replies the state sends to one client.
class RecordingClient final : public ReplyTarget {
 public:
  void deliver(std::vector<std::uint8_t> frame) override {
    REQUIRE(get_u32(frame.data()) == frame.size() - 4);
    Reader r(std::span<const std::uint8_t>(frame).subspan(4));
    Reply reply;
    reply.status = static_cast<ReplyStatus>(r.u8());
    reply.id = r.u32();
    reply.payload.assign(frame.begin() + 9, frame.end());
    replies.push_back(std::move(reply));
  }
  std::vector<Reply> replies;
};

class Harness {
 public:
  KeyValueState state{StoreLimits{}, 8};

  void send(RecordingClient& client, Op op, std::vector<std::string_view> keys,
            std::vector<std::string_view> values = {}, std::uint32_t number = 0,
            std::int64_t delta = 0) {
    Request r;
    r.op = op;
    r.id = next_id++;
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.number = number;
    r.delta = delta;
    state.handle(client, r);
  }
  std::uint32_t next_id = 1;
};

std::string bytes_of(const Reply& reply) {
  Reader r(reply.payload);
  return std::string(r.bytes());
}

}  // namespace

TEST_CASE("a get on a missing key is answered by the set that creates it", "[state]") {
  Harness h;
  RecordingClient waiter, writer;
  h.send(waiter, Op::Get, {"k"});
  CHECK(waiter.replies.empty());
  CHECK(h.state.parked() == 1);
  h.send(writer, Op::Set, {"k"}, {"v"});
  REQUIRE(waiter.replies.size() == 1);
  CHECK(waiter.replies[0].id == 1);
  CHECK(bytes_of(waiter.replies[0]) == "v");
  CHECK(h.state.parked() == 0);
}

TEST_CASE("a wait on many keys completes only when all exist at once", "[state]") {
  Harness h;
  RecordingClient waiter, writer;
  h.send(waiter, Op::Wait, {"a", "b", "c"});
  h.send(writer, Op::Set, {"b"}, {"1"});
  h.send(writer, Op::Set, {"a"}, {"1"});
  CHECK(waiter.replies.empty());
  // "a" is deleted before "c" arrives: the wait must notice and keep waiting.
  h.send(writer, Op::Delete, {"a"});
  h.send(writer, Op::Set, {"c"}, {"1"});
  CHECK(waiter.replies.empty());
  CHECK(h.state.parked() == 1);
  h.send(writer, Op::Append, {"a"}, {"x"});
  REQUIRE(waiter.replies.size() == 1);
  CHECK(waiter.replies[0].status == ReplyStatus::Ok);
}

TEST_CASE("multi_get sees a multi_set whole, never half", "[state]") {
  Harness h;
  RecordingClient waiter, writer;
  h.send(writer, Op::Set, {"y"}, {"old"});
  h.send(waiter, Op::MultiGet, {"x", "y"});
  h.send(writer, Op::MultiSet, {"x", "y"}, {"new-x", "new-y"});
  REQUIRE(waiter.replies.size() == 1);
  Reader r(waiter.replies[0].payload);
  CHECK(r.u32() == 2);
  CHECK(r.bytes() == "new-x");
  CHECK(r.bytes() == "new-y");
}

TEST_CASE("a cancelled wait is forgotten and never answered", "[state]") {
  Harness h;
  RecordingClient waiter, writer;
  h.send(waiter, Op::Get, {"k"});
  h.send(waiter, Op::Cancel, {}, {}, /*number=*/1);
  CHECK(h.state.parked() == 0);
  h.send(writer, Op::Set, {"k"}, {"v"});
  CHECK(waiter.replies.empty());
}

TEST_CASE("a disconnected client's waits and barrier arrivals are dropped", "[state]") {
  Harness h;
  RecordingClient gone, a, b;
  h.send(gone, Op::Wait, {"k"});
  h.send(gone, Op::Barrier, {"bar"}, {}, 3);
  h.send(a, Op::Barrier, {"bar"}, {}, 3);
  CHECK(h.state.parked() == 3);
  h.state.forget(gone);
  CHECK(h.state.parked() == 1);
  // With the dead client out of the count, two more arrivals are needed.
  h.send(b, Op::Barrier, {"bar"}, {}, 3);
  CHECK(a.replies.empty());
  RecordingClient c;
  h.send(c, Op::Barrier, {"bar"}, {}, 3);
  CHECK(a.replies.size() == 1);
  CHECK(b.replies.size() == 1);
  CHECK(c.replies.size() == 1);
  CHECK(gone.replies.empty());
  CHECK(h.state.parked() == 0);
}

TEST_CASE("barriers release all at once and can be reused", "[state]") {
  Harness h;
  std::vector<RecordingClient> clients(4);
  for (int round = 0; round < 3; ++round) {
    for (std::size_t i = 0; i + 1 < clients.size(); ++i)
      h.send(clients[i], Op::Barrier, {"b"}, {}, 4);
    for (auto& c : clients)
      CHECK(c.replies.size() == static_cast<std::size_t>(round));
    h.send(clients.back(), Op::Barrier, {"b"}, {}, 4);
    for (auto& c : clients) {
      REQUIRE(c.replies.size() == static_cast<std::size_t>(round + 1));
      CHECK(c.replies.back().status == ReplyStatus::Ok);
    }
  }
  CHECK(h.state.parked() == 0);
}

TEST_CASE("a barrier joined with another n is refused with both counts", "[state]") {
  Harness h;
  RecordingClient a, b;
  h.send(a, Op::Barrier, {"b"}, {}, 3);
  h.send(b, Op::Barrier, {"b"}, {}, 4);
  REQUIRE(b.replies.size() == 1);
  CHECK(b.replies[0].status == ReplyStatus::Error);
  Reader r(b.replies[0].payload);
  CHECK(r.u16() == static_cast<std::uint16_t>(ErrorCode::BarrierMismatch));
  const auto message = std::string(r.bytes());
  CHECK_THAT(message, ContainsSubstring("n=4") && ContainsSubstring("n=3"));
  CHECK(a.replies.empty());
}

TEST_CASE("one client cannot park more requests than the limit", "[state]") {
  Harness h;  // limit 8
  RecordingClient greedy;
  for (int i = 0; i < 8; ++i)
    h.send(greedy, Op::Get, {"never"});
  CHECK(greedy.replies.empty());
  h.send(greedy, Op::Barrier, {"b"}, {}, 2);
  REQUIRE(greedy.replies.size() == 1);
  CHECK(greedy.replies[0].status == ReplyStatus::Error);
  Reader r(greedy.replies[0].payload);
  CHECK(r.u16() == static_cast<std::uint16_t>(ErrorCode::TooManyWaits));
  CHECK(h.state.parked() == 8);
}

TEST_CASE("add keeps decimal text and refuses what is not an integer", "[state]") {
  Harness h;
  RecordingClient c;
  h.send(c, Op::Add, {"n"}, {}, 0, 5);
  h.send(c, Op::Add, {"n"}, {}, 0, -7);
  h.send(c, Op::Get, {"n"});
  REQUIRE(c.replies.size() == 3);
  CHECK(Reader(c.replies[1].payload).i64() == -2);
  CHECK(bytes_of(c.replies[2]) == "-2");

  for (std::string_view bad : {"", "12x", " 1", "1.5", "99999999999999999999"}) {
    INFO("value '" << bad << "'");
    h.send(c, Op::Set, {"bad"}, {bad});
    h.send(c, Op::Add, {"bad"}, {}, 0, 1);
    CHECK(c.replies.back().status == ReplyStatus::Error);
    CHECK(Reader(c.replies.back().payload).u16() ==
          static_cast<std::uint16_t>(ErrorCode::NotAnInteger));
  }
  h.send(c, Op::Set, {"big"}, {"9223372036854775807"});
  h.send(c, Op::Add, {"big"}, {}, 0, 1);
  CHECK(Reader(c.replies.back().payload).u16() == static_cast<std::uint16_t>(ErrorCode::Overflow));
}

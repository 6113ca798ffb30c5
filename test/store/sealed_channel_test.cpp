// A sealed store connection's records (store/src/sealed_channel.hpp) over
// a socket pair: plaintext of every size and shape through intact; bytes
// the channel holds (opened, or whole records read ahead) are announced so
// that nobody waits on the socket for them; a changed, cut or badly
// announced record is an error that says what was wrong, after the bytes
// of the records before it and none of its own; a write its owner no
// longer wants seals nothing more.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <thread>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include "support/catch.hpp"

#include "sealed_channel.hpp"

using collie::store::SealedChannel;

namespace {

struct Pair {
  Pair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0); }
  ~Pair() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  int fds[2] = {-1, -1};
};

collie::seal::Key key(std::uint8_t b) {
  collie::seal::Key k{};
  k.fill(b);
  return k;
}

std::vector<std::uint8_t> bytes(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::uint8_t>((i * 131 + seed * 7) % 251);
  return v;
}

// Seals `pieces` as one gathered write from `from`, and writes the records.
std::vector<std::uint8_t> sealed(SealedChannel& from,
                                 const std::vector<std::vector<std::uint8_t>>& pieces) {
  std::vector<asio::const_buffer> buffers;
  std::size_t total = 0;
  for (const auto& p : pieces) {
    buffers.emplace_back(p.data(), p.size());
    total += p.size();
  }
  std::vector<std::uint8_t> wire;
  for (std::size_t done = 0; done < total;) {
    std::size_t plain = 0;
    const auto records = from.seal_next(buffers, done, plain);
    REQUIRE(plain > 0);
    wire.insert(wire.end(), records.begin(), records.end());
    done += plain;
  }
  return wire;
}

void write_all(int fd, const std::vector<std::uint8_t>& v) {
  std::size_t done = 0;
  while (done < v.size()) {
    const ssize_t n = ::write(fd, v.data() + done, v.size() - done);
    REQUIRE(n > 0);
    done += static_cast<std::size_t>(n);
  }
}

// Reads through `to` in chunks of `chunk` until it would block or fails.
std::vector<std::uint8_t> drain(SealedChannel& to, int fd, std::size_t chunk,
                                std::error_code& ec) {
  std::vector<std::uint8_t> got;
  std::vector<std::uint8_t> buffer(chunk);
  for (;;) {
    const std::size_t n = to.read_some(fd, buffer, ec);
    if (ec) return got;
    REQUIRE(n > 0);
    got.insert(got.end(), buffer.begin(), buffer.begin() + static_cast<long>(n));
  }
}

}  // namespace

TEST_CASE("sealed channel: gathered writes of every shape arrive intact, in order",
          "[store][seal]") {
  Pair pair;
  SealedChannel a(key(1), key(2));
  SealedChannel b(key(2), key(1));
  // Pieces that cross records and batches: 1 byte, a record and one, two
  // batches' worth, and small ones between.
  const std::vector<std::vector<std::uint8_t>> pieces = {
      bytes(1, 1), bytes(65537, 2), bytes(3, 3), bytes(2 * SealedChannel::kBatchBytes + 5, 4),
      bytes(100, 5)};
  std::vector<std::uint8_t> expected;
  for (const auto& p : pieces)
    expected.insert(expected.end(), p.begin(), p.end());
  // A writer thread: the socket pair holds less than the whole stream.
  const auto wire = sealed(a, pieces);
  CHECK(wire.size() > expected.size());
  std::thread writer([&] { write_all(pair.fds[0], wire); });
  std::vector<std::uint8_t> got;
  std::vector<std::uint8_t> buffer(1000);  // small reads: the channel keeps the rest
  while (got.size() < expected.size()) {
    std::error_code ec;
    const std::size_t n = b.read_some(pair.fds[1], buffer, ec);
    if (ec == asio::error::would_block) {
      CHECK_FALSE(b.has_unread());  // nothing held back while it says so
      std::this_thread::yield();
      continue;
    }
    REQUIRE_FALSE(ec);
    got.insert(got.end(), buffer.begin(), buffer.begin() + static_cast<long>(n));
  }
  writer.join();
  CHECK(got == expected);
  CHECK_FALSE(b.has_unread());
  std::error_code ec;
  CHECK(b.read_some(pair.fds[1], buffer, ec) == 0);
  CHECK(ec == asio::error::would_block);
  // The other direction has keys of its own.
  write_all(pair.fds[1], sealed(b, {bytes(10, 9)}));
  CHECK(drain(a, pair.fds[0], 64, ec) == bytes(10, 9));
}

TEST_CASE("sealed channel: whole records read ahead are announced before the socket is asked",
          "[store][seal]") {
  Pair pair;
  SealedChannel a(key(1), key(2));
  SealedChannel b(key(2), key(1));
  // Three small records in the socket at once: the first read takes all
  // three in, and opens one.
  std::vector<std::uint8_t> wire;
  for (unsigned i = 0; i < 3; ++i) {
    const auto w = sealed(a, {bytes(10, i)});
    wire.insert(wire.end(), w.begin(), w.end());
  }
  write_all(pair.fds[0], wire);
  std::vector<std::uint8_t> buffer(10);
  for (unsigned i = 0; i < 3; ++i) {
    if (i > 0) CHECK(b.has_unread());  // the socket is empty: these are held here
    std::error_code ec;
    REQUIRE(b.read_some(pair.fds[1], buffer, ec) == 10);
    CHECK(buffer == bytes(10, i));
  }
  CHECK_FALSE(b.has_unread());
}

TEST_CASE("sealed channel: a changed, cut or badly announced record is an error that says so",
          "[store][seal]") {
  Pair pair;
  SealedChannel a(key(1), key(2));
  SealedChannel b(key(2), key(1));
  const auto first = sealed(a, {bytes(300, 1)});
  auto second = sealed(a, {bytes(300, 2)});
  std::string expected;
  SECTION("changed") {
    second[100] ^= 0x20;
    write_all(pair.fds[0], first);
    write_all(pair.fds[0], second);
    expected = "record number 1 (300 bytes) fails its authentication";
  }
  SECTION("cut") {
    write_all(pair.fds[0], first);
    write_all(pair.fds[0], std::vector<std::uint8_t>(second.begin(), second.begin() + 50));
    ::shutdown(pair.fds[0], SHUT_WR);
    expected = "ended in the middle of sealed record number 1 (50 of its bytes came)";
  }
  SECTION("announced too large") {
    second[3] = 0x7f;  // the length field (little-endian): 2 GiB
    write_all(pair.fds[0], first);
    write_all(pair.fds[0], second);
    expected = "record number 1 says it holds";
  }
  SECTION("replayed") {
    write_all(pair.fds[0], first);
    write_all(pair.fds[0], first);
    expected = "record number 1 (300 bytes) fails its authentication";
  }
  std::error_code ec;
  const auto got = drain(b, pair.fds[1], 4096, ec);
  CHECK(got == bytes(300, 1));  // the first record, and nothing of the second
  CHECK(ec == std::errc::bad_message);
  CHECK_THAT(b.failure(), ContainsSubstring(expected));
  // Beyond repair: it says so again, whatever comes next.
  std::vector<std::uint8_t> buffer(16);
  CHECK(b.read_some(pair.fds[1], buffer, ec) == 0);
  CHECK(ec == std::errc::bad_message);
}

TEST_CASE("sealed channel: a connection closed between records is the end, not an error",
          "[store][seal]") {
  Pair pair;
  SealedChannel a(key(1), key(2));
  SealedChannel b(key(2), key(1));
  write_all(pair.fds[0], sealed(a, {bytes(5, 1)}));
  ::shutdown(pair.fds[0], SHUT_WR);
  std::error_code ec;
  CHECK(drain(b, pair.fds[1], 64, ec) == bytes(5, 1));
  CHECK(ec == asio::error::eof);
}

TEST_CASE("sealed channel: memory is held only while bytes are under way, and bounded",
          "[store][seal]") {
  Pair pair;
  SealedChannel a(key(1), key(2));
  SealedChannel b(key(2), key(1));
  CHECK(a.held() == 0);
  CHECK(b.held() == 0);
  // Writing: one batch's records at a time, given back once written.
  const auto value = bytes(3 * SealedChannel::kBatchBytes + 11, 3);
  const asio::const_buffer plain(value.data(), value.size());
  std::size_t n = 0;
  SealedChannel writer(key(1), key(2));
  const auto records = writer.seal_next(std::span(&plain, 1), 0, n);
  CHECK(n == SealedChannel::kBatchBytes);
  CHECK(records.size() == collie::seal::sealed_size(n));
  CHECK(writer.held() == records.size());
  writer.written();
  CHECK(writer.held() == 0);
  // Reading: a record's first bytes are held while the rest is on its
  // way, never more than a record and the read-ahead.
  const std::size_t bound = collie::seal::kMaxRecordBytes + collie::seal::kOverheadBytes +
                            SealedChannel::kReadAhead;
  const auto wire = sealed(a, {value});
  std::vector<std::uint8_t> got;
  std::vector<std::uint8_t> buffer(7000);
  std::size_t most = 0;
  std::size_t sent = 0;
  while (got.size() < value.size()) {
    if (sent < wire.size()) {  // the wire in uneven pieces
      const std::size_t piece = std::min<std::size_t>(wire.size() - sent, 30001);
      write_all(pair.fds[0], std::vector<std::uint8_t>(wire.begin() + static_cast<long>(sent),
                                                       wire.begin() +
                                                           static_cast<long>(sent + piece)));
      sent += piece;
    }
    for (;;) {
      std::error_code ec;
      const std::size_t r = b.read_some(pair.fds[1], buffer, ec);
      most = std::max(most, b.held());
      if (ec == asio::error::would_block) {
        // Waiting for the socket: held only if a record is under way.
        CHECK((b.held() > 0) == b.holds_part());
        break;
      }
      REQUIRE_FALSE(ec);
      got.insert(got.end(), buffer.begin(), buffer.begin() + static_cast<long>(r));
    }
  }
  CHECK(got == value);
  CHECK(most > 0);
  CHECK(most <= bound);
  CHECK(b.held() == 0);  // everything taken: nothing held
}

TEST_CASE("sealed channel: a write no longer wanted seals no further batch of its frames",
          "[store][seal]") {
  // The store's and the client's writes: their owner may close the
  // connection and free the frames under way just after a batch was
  // written; the write must then end (operation_aborted), never seal the
  // next batch from freed memory (a sealed store test crashed so, once in
  // a few hundred runs under load).
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  asio::ip::tcp::socket writer(io), reader(io);
  writer.connect(acceptor.local_endpoint());
  acceptor.accept(reader);
  SealedChannel channel(key(1), key(2));
  const auto frame = bytes(3 * SealedChannel::kBatchBytes, 4);
  std::vector<asio::const_buffer> buffers{asio::buffer(frame)};
  int asked = 0;
  std::error_code result;
  std::size_t written = 0;
  bool done = false;
  collie::store::async_write_sealed(
      writer, channel, buffers,
      [&](std::error_code ec, std::size_t n) {
        result = ec;
        written = n;
        done = true;
      },
      [&] { return ++asked < 2; });  // the first batch, then no more
  // The reader drains what comes, so that every batch written completes.
  std::vector<std::uint8_t> sink(1 << 20);
  std::function<void()> drain = [&] {
    reader.async_read_some(asio::buffer(sink), [&](std::error_code ec, std::size_t) {
      if (!ec && !done) drain();
    });
  };
  drain();
  while (!done && io.run_one() > 0) {
  }
  CHECK(done);
  CHECK(result == asio::error::operation_aborted);
  CHECK(written == SealedChannel::kBatchBytes);  // the batches before it, and no more
  CHECK(asked == 2);
  CHECK(channel.held() == 0);  // its records went with it
}

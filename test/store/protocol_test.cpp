// The wire format: encoding, framing, and the parser's behaviour on bytes
// that no honest client would send.
#include "protocol.hpp"

#include <random>

#include "support/catch.hpp"

#include "auth.hpp"

using namespace collie::store;
using namespace collie::store::wire;

namespace {

std::span<const std::uint8_t> body_of(const std::vector<std::uint8_t>& frame) {
  REQUIRE(frame.size() >= 4);
  REQUIRE(get_u32(frame.data()) == frame.size() - 4);
  return {frame.data() + 4, frame.size() - 4};
}

std::string hex(std::span<const std::uint8_t> bytes) {
  std::string out;
  for (auto b : bytes) {
    constexpr char digits[] = "0123456789abcdef";
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

}  // namespace

TEST_CASE("integers are written in network byte order", "[protocol]") {
  std::vector<std::uint8_t> out;
  Writer w(out);
  w.u16(0x0102);
  w.u32(0x03040506);
  w.i64(-2);
  w.bytes("ab");
  const std::vector<std::uint8_t> expected = {1,    2,    3,    4,    5, 6, 0xff, 0xff, 0xff, 0xff,
                                              0xff, 0xff, 0xff, 0xfe, 0, 0, 0,    2,    'a',  'b'};
  CHECK(out == expected);

  Reader r(out);
  CHECK(r.u16() == 0x0102);
  CHECK(r.u32() == 0x03040506);
  CHECK(r.i64() == -2);
  CHECK(r.bytes() == "ab");
  CHECK(r.at_end());
  r.u8();
  CHECK_FALSE(r.ok());
}

TEST_CASE("a reader never reads past its input", "[protocol]") {
  const std::vector<std::uint8_t> claims_more = {0, 0, 0, 9, 'x'};
  Reader r(claims_more);
  CHECK(r.bytes().empty());
  CHECK_FALSE(r.ok());
  CHECK(r.u32() == 0);
  CHECK(r.remaining() == 0);
}

TEST_CASE("every operation survives encode then parse unchanged", "[protocol]") {
  const std::string big(1000, 'z');
  const std::string binary("\0\x01\xff", 3);
  std::vector<Request> requests;
  auto add = [&](Op op, std::vector<std::string_view> keys, std::vector<std::string_view> values,
                 std::int64_t delta = 0, std::uint32_t number = 0) {
    Request r;
    r.op = op;
    r.id = static_cast<std::uint32_t>(requests.size() * 7919 + 1);
    r.keys = std::move(keys);
    r.values = std::move(values);
    r.delta = delta;
    r.number = number;
    requests.push_back(r);
  };
  add(Op::Set, {"k"}, {big});
  add(Op::Set, {""}, {""});
  add(Op::Get, {binary}, {});
  add(Op::TryGet, {"k"}, {});
  add(Op::Add, {"counter"}, {}, INT64_MIN);
  add(Op::Add, {"counter"}, {}, INT64_MAX);
  add(Op::CompareSet, {"k"}, {"", binary});
  add(Op::Wait, {"a", "b", ""}, {});
  add(Op::Check, {}, {});
  add(Op::Delete, {"k"}, {});
  add(Op::CountKeys, {"prefix/"}, {});
  add(Op::ListKeys, {""}, {});
  add(Op::MultiGet, {"a", binary}, {});
  add(Op::MultiSet, {"a", "b"}, {"1", big});
  add(Op::Append, {"k"}, {binary});
  add(Op::Barrier, {"b"}, {}, 0, 4096);
  add(Op::Cancel, {}, {}, 0, 0xffffffff);
  add(Op::Ping, {}, {});

  for (const auto& request : requests) {
    INFO("op " << op_name(request.op));
    const auto frame = encode(request);
    const auto parsed = parse_request(body_of(frame), StoreLimits{});
    REQUIRE(parsed.kind == ParsedRequest::Kind::Ok);
    CHECK(parsed.request.op == request.op);
    CHECK(parsed.request.id == request.id);
    CHECK(parsed.request.keys == request.keys);
    CHECK(parsed.request.values == request.values);
    CHECK(parsed.request.delta == request.delta);
    CHECK(parsed.request.number == request.number);
  }
}

TEST_CASE("every truncation of a valid request is malformed, never a crash", "[protocol]") {
  Request r;
  r.op = Op::MultiSet;
  r.id = 42;
  r.keys = {"alpha", "beta"};
  r.values = {"1", "22"};
  const auto frame = encode(r);
  const auto body = body_of(frame);
  for (std::size_t n = 0; n < body.size(); ++n) {
    INFO("first " << n << " bytes");
    const auto parsed = parse_request(body.first(n), StoreLimits{});
    CHECK(parsed.kind == ParsedRequest::Kind::Malformed);
    CHECK_FALSE(parsed.error.empty());
  }
}

TEST_CASE("trailing bytes and unknown operations are malformed", "[protocol]") {
  Request r;
  r.op = Op::Get;
  r.id = 1;
  r.keys = {"k"};
  auto frame = encode(r);
  frame.push_back(0);
  std::vector<std::uint8_t> body(frame.begin() + 4, frame.end());
  auto parsed = parse_request(body, StoreLimits{});
  CHECK(parsed.kind == ParsedRequest::Kind::Malformed);
  CHECK_THAT(parsed.error, ContainsSubstring("trailing"));

  for (std::uint8_t op : {std::uint8_t{0}, std::uint8_t{18}, std::uint8_t{255}}) {
    const std::vector<std::uint8_t> unknown = {op, 0, 0, 0, 9};
    parsed = parse_request(unknown, StoreLimits{});
    CHECK(parsed.kind == ParsedRequest::Kind::Malformed);
    CHECK(parsed.request.id == 9);
    CHECK_THAT(parsed.error, ContainsSubstring("unknown operation"));
  }
}

TEST_CASE("a huge key count in a small request is refused before allocating", "[protocol]") {
  // u8 op, u32 id, u32 n = 60000 keys, but only 8 bytes follow.
  std::vector<std::uint8_t> body = {static_cast<std::uint8_t>(Op::Wait), 0, 0, 0, 1};
  Writer(body).u32(60000);
  Writer(body).bytes("abcd");
  const auto parsed = parse_request(body, StoreLimits{});
  CHECK(parsed.kind == ParsedRequest::Kind::Malformed);
  CHECK_THAT(parsed.error, ContainsSubstring("60000 keys"));
  CHECK(parsed.request.keys.capacity() == 0);
}

TEST_CASE("limits give an error reply, not a closed connection", "[protocol]") {
  StoreLimits limits;
  limits.max_key_bytes = 8;
  limits.max_value_bytes = 16;
  limits.max_keys_per_request = 3;

  auto parse = [&](Request r) {
    const auto frame = encode(r);
    return parse_request(body_of(frame), limits);
  };
  Request key_too_long{Op::Set, 5, {"123456789"}, {"v"}};
  auto parsed = parse(key_too_long);
  CHECK(parsed.kind == ParsedRequest::Kind::LimitExceeded);
  CHECK(parsed.request.id == 5);
  CHECK_THAT(parsed.error, ContainsSubstring("key of 9 bytes") && ContainsSubstring("limit of 8"));

  Request key_at_limit{Op::Set, 5, {"12345678"}, {std::string_view("0123456789abcdef")}};
  CHECK(parse(key_at_limit).kind == ParsedRequest::Kind::Ok);

  Request value_too_long{Op::Append, 6, {"k"}, {std::string_view("0123456789abcdefg")}};
  parsed = parse(value_too_long);
  CHECK(parsed.kind == ParsedRequest::Kind::LimitExceeded);
  CHECK_THAT(parsed.error, ContainsSubstring("value of 17 bytes"));

  Request too_many{Op::MultiGet, 7, {"a", "b", "c", "d"}, {}};
  parsed = parse(too_many);
  CHECK(parsed.kind == ParsedRequest::Kind::LimitExceeded);
  CHECK_THAT(parsed.error, ContainsSubstring("4 keys"));

  Request barrier_name_too_long{Op::Barrier, 8, {"barrier-name"}, {}, 0, 2};
  CHECK(parse(barrier_name_too_long).kind == ParsedRequest::Kind::LimitExceeded);
}

TEST_CASE("random bytes never crash the parser", "[protocol][pure]") {
  std::mt19937 random(12345);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> length(0, 64);
  int ok = 0;
  for (int i = 0; i < 200000; ++i) {
    std::vector<std::uint8_t> body(static_cast<std::size_t>(length(random)));
    for (auto& b : body)
      b = static_cast<std::uint8_t>(byte(random));
    // Bias towards valid op codes so the per-op paths are exercised too.
    if (!body.empty() && i % 2 == 0) body[0] = static_cast<std::uint8_t>(1 + i % 16);
    const auto parsed = parse_request(body, StoreLimits{});
    if (parsed.kind == ParsedRequest::Kind::Ok) {
      ++ok;
      // Whatever parses must re-encode to the same bytes.
      const auto again = encode(parsed.request);
      CHECK(std::vector<std::uint8_t>(again.begin() + 4, again.end()) == body);
    } else {
      CHECK_FALSE(parsed.error.empty());
    }
  }
  CHECK(ok > 0);
}

TEST_CASE("a frame buffer cuts a stream into frames however it arrives", "[protocol]") {
  std::vector<std::uint8_t> stream;
  std::vector<std::vector<std::uint8_t>> bodies;
  for (std::size_t size : {0u, 1u, 5u, 70000u, 3u, 200000u}) {
    std::vector<std::uint8_t> body(size);
    for (std::size_t i = 0; i < size; ++i)
      body[i] = static_cast<std::uint8_t>(i * 31 + size);
    bodies.push_back(body);
    std::uint8_t header[4];
    put_u32(header, static_cast<std::uint32_t>(size));
    stream.insert(stream.end(), header, header + 4);
    stream.insert(stream.end(), body.begin(), body.end());
  }
  for (std::size_t chunk : {1u, 3u, 4096u, 100000u}) {
    INFO("chunk " << chunk);
    FrameBuffer buffer(1 << 20);
    std::vector<std::vector<std::uint8_t>> received;
    std::size_t fed = 0;
    while (fed < stream.size()) {
      auto space = buffer.prepare();
      REQUIRE_FALSE(space.empty());
      const std::size_t n = std::min({chunk, space.size(), stream.size() - fed});
      std::copy_n(stream.begin() + static_cast<std::ptrdiff_t>(fed), n, space.begin());
      buffer.commit(n);
      fed += n;
      std::span<const std::uint8_t> body;
      while (buffer.next(body) == FrameBuffer::Next::Frame)
        received.emplace_back(body.begin(), body.end());
    }
    CHECK(received == bodies);
    CHECK(buffer.buffered() == 0);
  }
}

TEST_CASE("a frame buffer refuses a frame over its limit without allocating it", "[protocol]") {
  FrameBuffer buffer(1000);
  auto space = buffer.prepare();
  put_u32(space.data(), 0xfffffff0);
  buffer.commit(4);
  std::span<const std::uint8_t> body;
  CHECK(buffer.next(body) == FrameBuffer::Next::TooLarge);
  CHECK(buffer.frame_length() == 0xfffffff0);
  CHECK(buffer.prepare().size() <= 64 * 1024);
}

TEST_CASE("a frame buffer grows with the bytes received, not the bytes announced", "[protocol]") {
  FrameBuffer buffer(64u << 20);
  auto space = buffer.prepare();
  put_u32(space.data(), 60u << 20);  // announces 60 MiB
  buffer.commit(4);
  // Sends nothing more: the buffer must not have reserved 60 MiB.
  CHECK(buffer.prepare().size() < (1u << 20));
}

TEST_CASE("handshake messages round-trip", "[protocol]") {
  ClientHello client;
  client.has_token = true;
  for (std::size_t i = 0; i < kNonceBytes; ++i)
    client.nonce[i] = static_cast<std::uint8_t>(i);
  client.sealing = 0x21;
  client.key[31] = 3;
  const auto c = decode_client_hello(encode(client));
  CHECK(c.magic == kMagic);
  CHECK(c.version == kVersion);
  CHECK(c.has_token);
  CHECK(c.nonce == client.nonce);
  CHECK(c.sealing == 0x21);
  CHECK(c.key == client.key);

  ServerHello server;
  server.auth_required = true;
  server.status = HelloStatus::UnsupportedVersion;
  server.limits = {1, 2, 3, 4};
  server.nonce[5] = 9;
  server.proof[31] = 7;
  server.sealing = 0x11;
  server.key[0] = 4;
  const auto s = decode_server_hello(encode(server));
  CHECK(s.sealing == 0x11);
  CHECK(s.key == server.key);
  CHECK(s.magic == kMagic);
  CHECK(s.status == HelloStatus::UnsupportedVersion);
  CHECK(s.auth_required);
  CHECK(s.limits.max_key_bytes == 1);
  CHECK(s.limits.max_value_bytes == 2);
  CHECK(s.limits.max_keys_per_request == 3);
  CHECK(s.limits.max_message_bytes == 4);
  CHECK(s.nonce == server.nonce);
  CHECK(s.proof == server.proof);
}

TEST_CASE("proofs come from HKDF-SHA256 over the whole handshake, the server's proof left out",
          "[protocol][auth]") {
  // Expected values computed independently with Python's hmac and hashlib,
  // the hellos packed with struct (big-endian), then
  //   salt = hmac(b"secret-token", b"collie-store v3"); t = client + server
  //   prk = hmac(salt, sha256(t)); proof = hmac(prk, name + b"\x01")
  // with the client's nonce bytes(range(32)), the server's bytes(range(32, 64)),
  // limits 1, 2, 3, 4, idle timeout 5, both sealing fields 0, keys and proof zero.
  ClientHello client;
  client.has_token = true;
  ServerHello server;
  server.auth_required = true;
  server.limits = {1, 2, 3, 4};
  server.idle_timeout_ms = 5;
  for (std::size_t i = 0; i < kNonceBytes; ++i) {
    client.nonce[i] = static_cast<std::uint8_t>(i);
    server.nonce[i] = static_cast<std::uint8_t>(32 + i);
  }
  const auto c = encode(client);
  const auto keys = auth::handshake_keys("secret-token", c, encode(server), nullptr);
  CHECK(hex(keys.connector_proof) ==
        "8009dc082a2b2dc4837e38159758857bd6d85d1dba84d86acc581175d0aa243b");
  CHECK(hex(keys.acceptor_proof) ==
        "432e7a077ee2c35216a21d57936f4f86b599c345446958b82566cde72b896eed");
  // The proof the server's hello carries is not part of what it proves.
  server.proof = keys.acceptor_proof;
  CHECK(auth::handshake_keys("secret-token", c, encode(server), nullptr).acceptor_proof ==
        keys.acceptor_proof);
  // Every other byte is: a changed nonce, sealing field or token changes both.
  server.nonce[0] ^= 1;
  CHECK(auth::handshake_keys("secret-token", c, encode(server), nullptr).connector_proof !=
        keys.connector_proof);
  server.nonce[0] ^= 1;
  client.sealing = collie::seal::sealing_field(false, collie::seal::Mode::Off);
  CHECK(auth::handshake_keys("secret-token", encode(client), encode(server), nullptr)
            .acceptor_proof != keys.acceptor_proof);
  CHECK(auth::handshake_keys("other-token", c, encode(server), nullptr).connector_proof !=
        keys.connector_proof);
  CHECK_FALSE(collie::crypto::digests_equal(keys.connector_proof, keys.acceptor_proof));
  CHECK(auth::random_nonce() != auth::random_nonce());
}

TEST_CASE("error replies carry code and text, cut to fit any message limit", "[protocol]") {
  const auto frame = error_reply(77, ErrorCode::NotAnInteger, std::string(100000, 'e'));
  CHECK(frame.size() <= kMinMessageBytes);
  Reader r(body_of(frame));
  CHECK(r.u8() == static_cast<std::uint8_t>(ReplyStatus::Error));
  CHECK(r.u32() == 77);
  CHECK(r.u16() == static_cast<std::uint16_t>(ErrorCode::NotAnInteger));
  CHECK(r.bytes().size() < kMinMessageBytes);
  CHECK(r.at_end());
}

// The sealed wire's primitives (collie/seal.hpp) alone, without sockets:
// records that open only whole, unchanged, once and in order, under the
// right key; keys that both sides derive alike and every input changes.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/seal.hpp>

namespace seal = collie::seal;

namespace {

std::vector<std::uint8_t> bytes(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::uint8_t>((i * 31 + seed * 17 + i / 7) % 256);
  return v;
}

std::vector<std::uint8_t> sealed(seal::Sealer& s, const std::vector<std::uint8_t>& plain) {
  std::vector<std::uint8_t> out(plain.size() + seal::kOverheadBytes);
  const std::span<const std::byte> piece(reinterpret_cast<const std::byte*>(plain.data()),
                                         plain.size());
  s.seal(std::span(&piece, 1), out.data());
  return out;
}

// Opens `record` with `o`; the plaintext, or nothing if it fails.
std::optional<std::vector<std::uint8_t>> opened(seal::Opener& o,
                                                const std::vector<std::uint8_t>& record) {
  if (record.size() < seal::kOverheadBytes) return std::nullopt;
  const std::size_t n = seal::Opener::announced(record.data());
  if (n != record.size() - seal::kOverheadBytes) return std::nullopt;
  std::vector<std::uint8_t> out(n);
  if (!o.open(record.data(), n, out.data())) return std::nullopt;
  return out;
}

seal::Key key_of(unsigned seed) {
  seal::Key k{};
  for (std::size_t i = 0; i < k.size(); ++i)
    k[i] = static_cast<std::uint8_t>(i * 7 + seed);
  return k;
}

}  // namespace

TEST_CASE("seal: records of every size open to what was sealed, in pieces or whole", "[seal]") {
  seal::Sealer s(key_of(1));
  seal::Opener o(key_of(1));
  for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17},
                        std::size_t{4096}, seal::kMaxRecordBytes - 1, seal::kMaxRecordBytes}) {
    const auto plain = bytes(n, static_cast<unsigned>(n));
    const auto record = sealed(s, plain);
    CHECK(seal::Opener::announced(record.data()) == n);
    // The ciphertext is not the plaintext.
    CHECK_FALSE(std::equal(plain.begin(), plain.end(), record.begin() + seal::kLengthBytes));
    const auto back = opened(o, record);
    REQUIRE(back);
    CHECK(*back == plain);
  }
  // Three pieces make the record one piece of their bytes would.
  seal::Sealer whole(key_of(2));
  seal::Sealer parts(key_of(2));
  const auto plain = bytes(1000, 3);
  std::vector<std::uint8_t> a(plain.size() + seal::kOverheadBytes);
  const auto* p = reinterpret_cast<const std::byte*>(plain.data());
  const std::array<std::span<const std::byte>, 3> pieces = {
      std::span(p, 1), std::span(p + 1, 500), std::span(p + 501, 499)};
  parts.seal(pieces, a.data());
  CHECK(a == sealed(whole, plain));
  // Opened in place, where the ciphertext was.
  seal::Opener in_place(key_of(2));
  CHECK(in_place.open(a.data(), plain.size(), a.data() + seal::kLengthBytes));
  CHECK(std::equal(plain.begin(), plain.end(), a.begin() + seal::kLengthBytes));
}

TEST_CASE("seal: a record changed anywhere, cut, forged, replayed or reordered does not open",
          "[seal]") {
  const auto plain = bytes(300, 9);
  seal::Sealer s(key_of(4));
  const auto first = sealed(s, plain);
  const auto second = sealed(s, bytes(300, 10));

  SECTION("every byte flipped, length, ciphertext and tag") {
    for (std::size_t i = 0; i < first.size(); ++i) {
      auto changed = first;
      changed[i] ^= 0x01;
      seal::Opener o(key_of(4));
      INFO("byte " << i);
      CHECK_FALSE(opened(o, changed));
    }
  }
  SECTION("cut: a byte short, its tag's last byte gone") {
    seal::Opener o(key_of(4));
    auto cut = first;
    cut.erase(cut.begin() + 100);
    cut.push_back(0);  // the length still fits: the tag fails
    CHECK_FALSE(opened(o, cut));
  }
  SECTION("forged under another key") {
    seal::Sealer other(key_of(5));
    seal::Opener o(key_of(4));
    CHECK_FALSE(opened(o, sealed(other, plain)));
  }
  SECTION("replayed: the first record twice") {
    seal::Opener o(key_of(4));
    CHECK(opened(o, first));
    CHECK_FALSE(opened(o, first));
  }
  SECTION("reordered: the second before the first; neither opens") {
    seal::Opener o(key_of(4));
    CHECK_FALSE(opened(o, second));
    CHECK_FALSE(opened(o, first));
  }
  SECTION("dropped: the first lost, the second does not open") {
    seal::Opener o(key_of(4));
    CHECK_FALSE(opened(o, second));
  }
  SECTION("in order, both open") {
    seal::Opener o(key_of(4));
    CHECK(opened(o, first));
    CHECK(opened(o, second));
  }
}

TEST_CASE("seal: a record holds 1 to kMaxRecordBytes bytes", "[seal]") {
  seal::Sealer s(key_of(1));
  std::vector<std::uint8_t> out(seal::kMaxRecordBytes + 1 + seal::kOverheadBytes);
  const std::vector<std::byte> big(seal::kMaxRecordBytes + 1);
  const std::span<const std::byte> piece(big);
  CHECK_THROWS_AS(s.seal(std::span(&piece, 1), out.data()), collie::Error);
  CHECK_THROWS_AS(s.seal({}, out.data()), collie::Error);
}

TEST_CASE("seal: both sides of an X25519 exchange share one secret, and a null key gives none",
          "[seal]") {
  seal::KeyExchange a;
  seal::KeyExchange b;
  CHECK(a.public_key() != b.public_key());
  CHECK(a.shared(b.public_key()) == b.shared(a.public_key()));
  seal::KeyExchange c;
  CHECK(a.shared(c.public_key()) != a.shared(b.public_key()));
  CHECK_THROWS_AS(a.shared(seal::PublicKey{}), collie::Error);
}

TEST_CASE("seal: derive gives both sides the same keys, and every input changes all of them",
          "[seal]") {
  const std::vector<std::uint8_t> shared = bytes(32, 1);
  const std::vector<std::uint8_t> transcript = bytes(168, 2);
  const auto k = seal::derive("secret", "collie-peer v2", shared, transcript);
  const auto again = seal::derive("secret", "collie-peer v2", shared, transcript);
  CHECK(k.connector_proof == again.connector_proof);
  CHECK(k.acceptor_to_connector == again.acceptor_to_connector);
  // Four outputs, each its own.
  CHECK(k.connector_proof != k.acceptor_proof);
  CHECK(k.connector_to_acceptor != k.acceptor_to_connector);
  auto changed_transcript = transcript;
  changed_transcript[100] ^= 1;
  auto changed_shared = shared;
  changed_shared[0] ^= 1;
  for (const auto& other :
       {seal::derive("Secret", "collie-peer v2", shared, transcript),
        seal::derive("secret", "collie-store v2", shared, transcript),
        seal::derive("secret", "collie-peer v2", changed_shared, transcript),
        seal::derive("secret", "collie-peer v2", {}, transcript),
        seal::derive("secret", "collie-peer v2", shared, changed_transcript)}) {
    CHECK(other.connector_proof != k.connector_proof);
    CHECK(other.acceptor_proof != k.acceptor_proof);
    CHECK(other.connector_to_acceptor != k.connector_to_acceptor);
    CHECK(other.acceptor_to_connector != k.acceptor_to_connector);
  }
}

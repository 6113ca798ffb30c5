// Certificate proofs (collie/certificates.hpp) against an authority of the
// test's own (support/test_pki.hpp): a proof is accepted for the names its
// certificate holds, through an intermediate authority too, with P-256 and
// Ed25519 keys; refused, saying why, for another name, another authority,
// an expired certificate, another handshake's transcript, a changed or
// cut proof; a proof's length prefix out of bounds is named; loading
// refuses a key that is not the certificate's and a certificate its own
// authorities do not accept.
#include <array>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/catch.hpp"

#include <collie/certificates.hpp>
#include <collie/error.hpp>

#include "support/scratch_dir.hpp"
#include "support/test_pki.hpp"

using collie::seal::Certificates;
using collie::test::ScratchDir;
using collie::test::TestPki;

namespace {

std::vector<std::uint8_t> transcript(std::uint8_t seed) {
  std::vector<std::uint8_t> t(200);
  for (std::size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<std::uint8_t>(i * 7 + seed);
  return t;
}

}  // namespace

TEST_CASE("certificates: a proof is accepted for the names its certificate holds",
          "[seal][certificates]") {
  ScratchDir dir;
  TestPki pki(dir.path(), "site");
  const auto type = GENERATE(TestPki::KeyType::P256, TestPki::KeyType::Ed25519);
  const bool via_intermediate = GENERATE(false, true);
  INFO("Ed25519 " << (type == TestPki::KeyType::Ed25519) << ", intermediate " << via_intermediate);
  const auto a = pki.issue("node-a", {"IP:10.77.0.1", "DNS:node-a.example"}, type, -60, 86400,
                           via_intermediate);
  const auto b = pki.issue("node-b", {"IP:10.77.0.2"});
  const auto mine = Certificates::load(a.cert, a.key, pki.ca_file);
  const auto theirs = Certificates::load(b.cert, b.key, pki.ca_file);
  CHECK_THAT(mine->describe(), ContainsSubstring("CN=node-a") && ContainsSubstring(a.cert));
  const auto proof = mine->prove(transcript(1));
  CHECK(proof.size() <= collie::seal::kMaxProofBytes);
  CHECK(theirs->check(proof, transcript(1), "10.77.0.1") == "");
  CHECK(theirs->check(proof, transcript(1), "node-a.example") == "");
  CHECK_THAT(theirs->check(proof, transcript(1), "10.77.0.2"),
             ContainsSubstring("CN=node-a") && ContainsSubstring("does not name 10.77.0.2"));
  CHECK_THAT(theirs->check(proof, transcript(1), "node-b.example"),
             ContainsSubstring("does not name node-b.example"));
  // A certificate with a DNS name only names no address.
  const auto named = Certificates::load(
      pki.issue("named", {"DNS:elsewhere.example"}).cert, dir.file("named.key"), pki.ca_file);
  CHECK_THAT(theirs->check(named->prove(transcript(1)), transcript(1), "10.77.0.2"),
             ContainsSubstring("does not name 10.77.0.2"));
  // Another handshake: the same proof signs another transcript.
  CHECK_THAT(theirs->check(proof, transcript(2), "10.77.0.1"),
             ContainsSubstring("signature does not cover this handshake"));
}

TEST_CASE("certificates: another authority's, an expired or a changed proof is refused, saying why",
          "[seal][certificates]") {
  ScratchDir dir;
  TestPki site(dir.path(), "site");
  TestPki other(dir.path(), "other");
  const auto me = site.issue("me", {"IP:10.77.0.1"});
  const auto checker = Certificates::load(me.cert, me.key, site.ca_file);
  const auto t = transcript(3);
  SECTION("another authority") {
    const auto stranger = other.issue("stranger", {"IP:10.77.0.9"});
    const auto s = Certificates::load(stranger.cert, stranger.key, other.ca_file);
    CHECK_THAT(checker->check(s->prove(t), t, "10.77.0.9"),
               ContainsSubstring("CN=stranger") && ContainsSubstring("is not accepted") &&
                   ContainsSubstring("local issuer"));
  }
  SECTION("expired") {
    const auto old = site.issue("old", {"IP:10.77.0.3"}, TestPki::KeyType::P256, -7200, -3600);
    // Loading runs the check a peer runs on its proof (the same
    // verification, without a name), so it is refused there first.
    CHECK_THROWS_WITH(Certificates::load(old.cert, old.key, site.ca_file),
                      ContainsSubstring("not accepted by the authorities") &&
                          ContainsSubstring("expired"));
  }
  SECTION("changed, cut or padded") {
    const auto peer = site.issue("peer", {"IP:10.77.0.2"});
    auto proof = Certificates::load(peer.cert, peer.key, site.ca_file)->prove(t);
    REQUIRE(checker->check(proof, t, "10.77.0.2") == "");
    auto flipped = proof;
    flipped.back() ^= 1;  // the signature
    CHECK_THAT(checker->check(flipped, t, "10.77.0.2"), ContainsSubstring("signature"));
    auto in_cert = proof;
    in_cert[100] ^= 1;  // inside the certificate: its issuer's signature fails, or it no longer parses
    CHECK_FALSE(checker->check(in_cert, t, "10.77.0.2").empty());
    const std::vector<std::uint8_t> cut(proof.begin(), proof.end() - 5);
    CHECK_THAT(checker->check(cut, t, "10.77.0.2"), ContainsSubstring("malformed"));
    auto padded = proof;
    padded.push_back(0);
    CHECK_THAT(checker->check(padded, t, "10.77.0.2"), ContainsSubstring("malformed"));
    CHECK_THAT(checker->check({}, t, "10.77.0.2"), ContainsSubstring("malformed"));
    std::vector<std::uint8_t> too_many(proof);
    too_many[0] = 9;
    CHECK_THAT(checker->check(too_many, t, "10.77.0.2"), ContainsSubstring("malformed"));
  }
}

TEST_CASE("certificates: loading names the file and what is wrong with it", "[seal][certificates]") {
  ScratchDir dir;
  TestPki site(dir.path(), "site");
  TestPki other(dir.path(), "other");
  const auto a = site.issue("a", {"IP:10.77.0.1"});
  const auto b = site.issue("b", {"IP:10.77.0.2"});
  CHECK_THROWS_WITH(Certificates::load(dir.file("none.pem"), a.key, site.ca_file),
                    ContainsSubstring("cannot read the certificate file") &&
                        ContainsSubstring("none.pem"));
  CHECK_THROWS_WITH(Certificates::load(a.key, a.key, site.ca_file),
                    ContainsSubstring("holds no PEM certificate"));
  CHECK_THROWS_WITH(Certificates::load(a.cert, a.cert, site.ca_file),
                    ContainsSubstring("holds no PEM private key"));
  CHECK_THROWS_WITH(Certificates::load(a.cert, b.key, site.ca_file),
                    ContainsSubstring("is not the key of the certificate") &&
                        ContainsSubstring("CN=a"));
  CHECK_THROWS_WITH(Certificates::load(a.cert, a.key, other.ca_file),
                    ContainsSubstring("not accepted by the authorities") &&
                        ContainsSubstring(other.ca_file));
  CHECK_THROWS_WITH(Certificates::load(a.cert, a.key, a.key),
                    ContainsSubstring("cannot load the certificate authorities"));
}

TEST_CASE("certificates: a proof travels after its length, and a length out of bounds is named",
          "[seal][certificates][pure]") {
  using collie::seal::kMaxProofBytes;
  using collie::seal::kProofLengthBytes;
  for (const std::size_t n : {std::size_t{1}, std::size_t{255}, std::size_t{256}, kMaxProofBytes}) {
    INFO("proof of " << n << " bytes");
    std::vector<std::uint8_t> proof(n);
    for (std::size_t i = 0; i < n; ++i) proof[i] = static_cast<std::uint8_t>(i * 13 + 5);
    const auto framed = collie::seal::framed_proof(proof);
    REQUIRE(framed.size() == kProofLengthBytes + n);
    // Little-endian, by hand.
    CHECK(framed[0] == (n & 0xff));
    CHECK(framed[1] == (n >> 8));
    CHECK(std::vector<std::uint8_t>(framed.begin() + kProofLengthBytes, framed.end()) == proof);
    const auto length = collie::seal::proof_length(
        std::span<const std::uint8_t, kProofLengthBytes>(framed.data(), kProofLengthBytes));
    CHECK(length.problem.empty());
    CHECK(length.bytes == n);
  }
  for (const std::size_t n : {std::size_t{0}, kMaxProofBytes + 1, std::size_t{0xffff}}) {
    INFO("a prefix saying " << n);
    const std::array<std::uint8_t, kProofLengthBytes> prefix{static_cast<std::uint8_t>(n & 0xff),
                                                             static_cast<std::uint8_t>(n >> 8)};
    const auto length = collie::seal::proof_length(prefix);
    CHECK(length.problem == fmt::format("its certificate proof says it holds {} bytes (1 to {} may)",
                                        n, kMaxProofBytes));
  }
}

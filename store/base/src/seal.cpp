// X25519, HKDF-SHA256 and AES-256-GCM records from OpenSSL's libcrypto
// (seal.hpp).
#include <collie/seal.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::seal {

namespace {

constexpr std::size_t kNonceBytes = 12;

std::array<std::uint8_t, kNonceBytes> nonce_of(std::uint64_t sequence) {
  std::array<std::uint8_t, kNonceBytes> nonce{};
  for (int i = 0; i < 8; ++i)
    nonce[4 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(sequence >> (8 * i));
  return nonce;
}

crypto::Digest hmac(std::span<const std::uint8_t> key, std::span<const std::uint8_t> message) {
  crypto::Digest out{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(),
           out.data(), &length) == nullptr ||
      length != out.size())
    throw Error("HMAC-SHA256 failed (OpenSSL)");
  return out;
}

std::span<const std::uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// HKDF-Expand for one block: HMAC(prk, info || 0x01).
crypto::Digest expand(const crypto::Digest& prk, std::string_view info) {
  std::vector<std::uint8_t> message(info.begin(), info.end());
  message.push_back(1);
  return hmac(prk, message);
}

EVP_CIPHER_CTX* new_context(const Key& key, bool encrypt) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx == nullptr) throw Error("cannot make a cipher context (OpenSSL)");
  const int ok = encrypt ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)
                         : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.data(), nullptr);
  if (ok != 1) {
    EVP_CIPHER_CTX_free(ctx);
    throw Error("cannot set up AES-256-GCM (OpenSSL)");
  }
  return ctx;
}

void put_length(std::uint8_t* out, std::size_t n) {
  for (int i = 0; i < 4; ++i)
    out[i] = static_cast<std::uint8_t>(n >> (8 * i));
}

}  // namespace

KeyExchange::KeyExchange() {
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr);
  const bool made = ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 &&
                    EVP_PKEY_keygen(ctx, &key_) == 1;
  EVP_PKEY_CTX_free(ctx);
  std::size_t length = public_.size();
  if (!made || EVP_PKEY_get_raw_public_key(key_, public_.data(), &length) != 1 ||
      length != public_.size()) {
    EVP_PKEY_free(key_);
    throw Error("cannot make an X25519 key pair (OpenSSL)");
  }
}

KeyExchange::~KeyExchange() { EVP_PKEY_free(key_); }

Key KeyExchange::shared(const PublicKey& peer) const {
  EVP_PKEY* theirs =
      EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer.data(), peer.size());
  if (theirs == nullptr) throw Error("the peer's X25519 public key is not one");
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new(key_, nullptr);
  Key out{};
  std::size_t length = out.size();
  // OpenSSL refuses a point of small order (an all-zero secret): a peer
  // cannot force a key it knows.
  const bool ok = ctx != nullptr && EVP_PKEY_derive_init(ctx) == 1 &&
                  EVP_PKEY_derive_set_peer(ctx, theirs) == 1 &&
                  EVP_PKEY_derive(ctx, out.data(), &length) == 1 && length == out.size();
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(theirs);
  if (!ok) throw Error("the peer's X25519 public key gives no shared secret");
  return out;
}

SessionKeys derive(std::string_view secret, std::string_view label,
                   std::span<const std::uint8_t> shared, std::span<const std::uint8_t> transcript) {
  const auto salt = hmac(bytes_of(secret), bytes_of(label));
  std::vector<std::uint8_t> input(shared.begin(), shared.end());
  std::array<std::uint8_t, SHA256_DIGEST_LENGTH> digest{};
  SHA256(transcript.data(), transcript.size(), digest.data());
  input.insert(input.end(), digest.begin(), digest.end());
  const auto prk = hmac(salt, input);
  SessionKeys keys;
  keys.connector_proof = expand(prk, "connector proof");
  keys.acceptor_proof = expand(prk, "acceptor proof");
  const auto c2a = expand(prk, "connector to acceptor key");
  const auto a2c = expand(prk, "acceptor to connector key");
  std::memcpy(keys.connector_to_acceptor.data(), c2a.data(), kKeyBytes);
  std::memcpy(keys.acceptor_to_connector.data(), a2c.data(), kKeyBytes);
  std::memset(input.data(), 0, input.size());
  return keys;
}

Mode mode_of(std::string_view word) {
  if (word == "on") return Mode::On;
  if (word == "off") return Mode::Off;
  return Mode::Auto;
}

bool same_host(int fd) {
  sockaddr_storage local{};
  sockaddr_storage remote{};
  socklen_t local_length = sizeof local;
  socklen_t remote_length = sizeof remote;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_length) != 0)
    return false;
  if (remote.ss_family == AF_INET && local.ss_family == AF_INET) {
    const auto& r = reinterpret_cast<const sockaddr_in&>(remote);
    const auto& l = reinterpret_cast<const sockaddr_in&>(local);
    return (ntohl(r.sin_addr.s_addr) >> 24) == 127 || r.sin_addr.s_addr == l.sin_addr.s_addr;
  }
  if (remote.ss_family == AF_INET6 && local.ss_family == AF_INET6) {
    const auto& r = reinterpret_cast<const sockaddr_in6&>(remote).sin6_addr;
    const auto& l = reinterpret_cast<const sockaddr_in6&>(local).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&r)) return true;
    // An IPv4 address mapped into IPv6 (::ffff:127.x.y.z): loopback too.
    if (IN6_IS_ADDR_V4MAPPED(&r) && r.s6_addr[12] == 127) return true;
    return std::memcmp(&r, &l, sizeof r) == 0;
  }
  return false;
}

std::string describe_sealing(std::uint16_t field) {
  const auto mode = mode_of_field(field);
  const char* word = mode == Mode::On ? "on" : mode == Mode::Off ? "off" : "auto";
  const char* why = mode == Mode::On    ? "every connection"
                    : mode == Mode::Off ? "no connection"
                    : seals(field)      ? "between hosts, and this one is"
                                        : "between hosts, and this one is not";
  return fmt::format("{} (COLLIE_SEAL={}: {})", seals(field) ? "seals it" : "leaves it clear",
                     word, why);
}

Sealer::Sealer(const Key& key) : ctx_(new_context(key, true)) {}
Sealer::~Sealer() { EVP_CIPHER_CTX_free(ctx_); }

void Sealer::seal(std::span<const std::span<const std::byte>> pieces, std::uint8_t* out) {
  std::size_t n = 0;
  for (const auto& p : pieces)
    n += p.size();
  if (n == 0 || n > kMaxRecordBytes)
    throw Error(fmt::format("a sealed record must hold 1 to {} bytes, not {}", kMaxRecordBytes, n));
  seal_records(pieces, n, out);
}

std::size_t Sealer::seal_records(std::span<const std::span<const std::byte>> pieces,
                                 std::size_t bytes, std::uint8_t* out) {
  std::size_t piece = 0;
  std::size_t within = 0;  // bytes of pieces[piece] already sealed
  std::uint8_t* at = out;
  while (bytes > 0) {
    const std::size_t n = std::min(bytes, kMaxRecordBytes);
    if (sequence_ == UINT64_MAX) throw Error("a sealed connection ran out of record numbers");
    const auto nonce = nonce_of(sequence_++);
    put_length(at, n);
    int length = 0;
    bool ok = EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
              EVP_EncryptUpdate(ctx_, nullptr, &length, at, kLengthBytes) == 1;
    std::uint8_t* text = at + kLengthBytes;
    for (std::size_t filled = 0; ok && filled < n;) {
      if (piece == pieces.size())
        throw Error(fmt::format("sealing asked for {} more bytes than its pieces hold", n - filled));
      const auto& p = pieces[piece];
      const std::size_t take = std::min(p.size() - within, n - filled);
      if (take > 0) {
        ok = EVP_EncryptUpdate(ctx_, text, &length,
                               reinterpret_cast<const std::uint8_t*>(p.data()) + within,
                               static_cast<int>(take)) == 1;
        text += length;
      }
      filled += take;
      within += take;
      if (within == p.size()) {
        ++piece;
        within = 0;
      }
    }
    ok = ok && EVP_EncryptFinal_ex(ctx_, text, &length) == 1;
    text += length;
    ok = ok && text == at + kLengthBytes + n &&
         EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), text) == 1;
    if (!ok) throw Error("sealing a record failed (OpenSSL AES-256-GCM)");
    at = text + kTagBytes;
    bytes -= n;
  }
  return static_cast<std::size_t>(at - out);
}

Opener::Opener(const Key& key) : ctx_(new_context(key, false)) {}
Opener::~Opener() { EVP_CIPHER_CTX_free(ctx_); }

std::size_t Opener::announced(const std::uint8_t* record) {
  std::size_t n = 0;
  for (int i = 3; i >= 0; --i)
    n = (n << 8) | record[i];
  return n;
}

bool Opener::open(const std::uint8_t* record, std::size_t n, std::uint8_t* out) {
  if (sequence_ == UINT64_MAX) return false;
  const auto nonce = nonce_of(sequence_++);
  int length = 0;
  // The tag is copied out first: opened in place, `out` overwrites the
  // ciphertext, not the tag behind it, but the library is told a copy.
  std::array<std::uint8_t, kTagBytes> tag{};
  std::memcpy(tag.data(), record + kLengthBytes + n, kTagBytes);
  bool ok = EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
            EVP_DecryptUpdate(ctx_, nullptr, &length, record, kLengthBytes) == 1 &&
            EVP_DecryptUpdate(ctx_, out, &length, record + kLengthBytes, static_cast<int>(n)) ==
                1 &&
            static_cast<std::size_t>(length) == n &&
            EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes),
                                tag.data()) == 1;
  ok = ok && EVP_DecryptFinal_ex(ctx_, out + n, &length) == 1;
  return ok;
}

}  // namespace collie::seal

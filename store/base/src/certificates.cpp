// Certificates for the sealed wire, from OpenSSL's libcrypto
// (certificates.hpp).
#include <collie/certificates.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <fmt/format.h>

#include <collie/environment.hpp>
#include <collie/error.hpp>

namespace collie::seal {

namespace {

std::string openssl_error() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no reason given";
  char text[256];
  ERR_error_string_n(e, text, sizeof text);
  return text;
}

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

File open_file(const std::string& path, const char* what) {
  File f(std::fopen(path.c_str(), "r"));
  if (!f) throw Error(fmt::format("cannot read {} '{}': {}", what, path, std::strerror(errno)));
  return f;
}

// The message a signature covers: the transcript, under a label of its own.
std::vector<std::uint8_t> signed_message(std::span<const std::uint8_t> transcript) {
  static constexpr std::string_view kLabel = "collie certificate proof v1";
  std::vector<std::uint8_t> m(kLabel.size() + transcript.size());
  std::memcpy(m.data(), kLabel.data(), kLabel.size());
  if (!transcript.empty())
    std::memcpy(m.data() + kLabel.size(), transcript.data(), transcript.size());
  return m;
}

// Ed25519 and Ed448 sign the message itself; other keys its SHA-256.
const EVP_MD* digest_for(EVP_PKEY* key) {
  const int id = EVP_PKEY_get_base_id(key);
  return id == EVP_PKEY_ED25519 || id == EVP_PKEY_ED448 ? nullptr : EVP_sha256();
}

std::string subject_of(X509* cert) {
  char* text = X509_NAME_oneline(X509_get_subject_name(cert), nullptr, 0);
  std::string s = text != nullptr ? text : "?";
  OPENSSL_free(text);
  return s;
}

struct ChainFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
using Chain = std::unique_ptr<STACK_OF(X509), ChainFree>;

}  // namespace

struct Certificates::Impl {
  ~Impl() {
    EVP_PKEY_free(key);
    X509_STORE_free(trusted);
  }
  Chain chain{sk_X509_new_null()};  // this host's certificate first
  EVP_PKEY* key = nullptr;
  X509_STORE* trusted = nullptr;
  std::vector<std::vector<std::uint8_t>> der;  // the chain, as it is sent
};

Certificates::Certificates(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Certificates::~Certificates() = default;

std::string Certificates::settings_problem(const std::string& cert, const std::string& key,
                                           const std::string& ca) {
  if (cert.empty() == ca.empty() && !(cert.empty() && !key.empty())) return std::string();
  return fmt::format("{} and {} go together ({} too, unless the key is in the certificate's "
                     "file): set them all, or none",
                     environment::kSealCert.name, environment::kSealCa.name,
                     environment::kSealKey.name);
}

std::shared_ptr<const Certificates> Certificates::from_settings(const std::string& cert,
                                                                const std::string& key,
                                                                const std::string& ca) {
  if (cert.empty() && key.empty() && ca.empty()) return nullptr;
  if (auto problem = settings_problem(cert, key, ca); !problem.empty()) throw Error(problem);
  const auto& key_file = key.empty() ? cert : key;
  static std::mutex mu;
  static std::string loaded_from;
  static std::shared_ptr<const Certificates> loaded;
  const auto files = cert + '\n' + key_file + '\n' + ca;
  std::lock_guard lock(mu);
  if (!loaded || loaded_from != files) {
    loaded = load(cert, key_file, ca);
    loaded_from = files;
  }
  return loaded;
}

std::shared_ptr<const Certificates> Certificates::load(const std::string& cert_file,
                                                       const std::string& key_file,
                                                       const std::string& ca_file) {
  auto impl = std::make_unique<Impl>();
  {
    auto f = open_file(cert_file, "the certificate file");
    while (X509* c = PEM_read_X509(f.get(), nullptr, nullptr, nullptr))
      sk_X509_push(impl->chain.get(), c);
    ERR_clear_error();  // the end of the file reads as an error
  }
  const int n = sk_X509_num(impl->chain.get());
  if (n == 0) throw Error(fmt::format("the certificate file '{}' holds no PEM certificate", cert_file));
  if (n > static_cast<int>(kMaxChain))
    throw Error(fmt::format("the certificate file '{}' holds {} certificates; at most {} are sent",
                            cert_file, n, kMaxChain));
  {
    auto f = open_file(key_file, "the private key file");
    impl->key = PEM_read_PrivateKey(f.get(), nullptr, nullptr, nullptr);
    if (impl->key == nullptr)
      throw Error(fmt::format("the private key file '{}' holds no PEM private key (without a "
                              "passphrase): {}",
                              key_file, openssl_error()));
  }
  X509* leaf = sk_X509_value(impl->chain.get(), 0);
  if (X509_check_private_key(leaf, impl->key) != 1) {
    ERR_clear_error();
    throw Error(fmt::format("the private key in '{}' is not the key of the certificate in '{}' ({})",
                            key_file, cert_file, subject_of(leaf)));
  }
  impl->trusted = X509_STORE_new();
  if (impl->trusted == nullptr || X509_STORE_load_file(impl->trusted, ca_file.c_str()) != 1) {
    throw Error(fmt::format("cannot load the certificate authorities of '{}': {}", ca_file,
                            openssl_error()));
  }
  for (int i = 0; i < n; ++i) {
    X509* c = sk_X509_value(impl->chain.get(), i);
    const int length = i2d_X509(c, nullptr);
    if (length <= 0 || length > 0xffff) throw Error("a certificate too large to send");
    std::vector<std::uint8_t> der(static_cast<std::size_t>(length));
    unsigned char* at = der.data();
    i2d_X509(c, &at);
    impl->der.push_back(std::move(der));
  }
  auto certificates = std::shared_ptr<Certificates>(new Certificates(std::move(impl)));
  // Its own authorities must accept it (a mistake caught here, not at
  // every peer's refusal), whatever its name.
  std::string why;
  {
    const auto proof = certificates->prove({});
    why = certificates->check(proof, {}, "");
  }
  if (!why.empty())
    throw Error(fmt::format("the certificate in '{}' is not accepted by the authorities of '{}': "
                            "{}",
                            cert_file, ca_file, why));
  certificates->description_ = fmt::format("{} (from {})", subject_of(leaf), cert_file);
  return certificates;
}

std::vector<std::uint8_t> Certificates::prove(std::span<const std::uint8_t> transcript) const {
  std::vector<std::uint8_t> out;
  out.push_back(static_cast<std::uint8_t>(impl_->der.size()));
  const auto put16 = [&](std::size_t v) {
    out.push_back(static_cast<std::uint8_t>(v));
    out.push_back(static_cast<std::uint8_t>(v >> 8));
  };
  for (const auto& d : impl_->der) {
    put16(d.size());
    out.insert(out.end(), d.begin(), d.end());
  }
  const auto message = signed_message(transcript);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  std::size_t length = 0;
  bool ok = ctx != nullptr &&
            EVP_DigestSignInit(ctx, nullptr, digest_for(impl_->key), nullptr, impl_->key) == 1 &&
            EVP_DigestSign(ctx, nullptr, &length, message.data(), message.size()) == 1;
  std::vector<std::uint8_t> signature(length);
  ok = ok && EVP_DigestSign(ctx, signature.data(), &length, message.data(), message.size()) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok) throw Error("signing a certificate proof failed: " + openssl_error());
  signature.resize(length);
  put16(signature.size());
  out.insert(out.end(), signature.begin(), signature.end());
  if (out.size() > kMaxProofBytes)
    throw Error(fmt::format("a certificate proof of {} bytes is more than the {} a peer accepts",
                            out.size(), kMaxProofBytes));
  return out;
}

std::vector<std::uint8_t> framed_proof(std::span<const std::uint8_t> proof) {
  std::vector<std::uint8_t> out(kProofLengthBytes + proof.size());
  out[0] = static_cast<std::uint8_t>(proof.size());
  out[1] = static_cast<std::uint8_t>(proof.size() >> 8);
  std::copy(proof.begin(), proof.end(), out.begin() + kProofLengthBytes);
  return out;
}

ProofLength proof_length(std::span<const std::uint8_t, kProofLengthBytes> prefix) {
  ProofLength length;
  length.bytes = static_cast<std::size_t>(prefix[0] | (prefix[1] << 8));
  if (length.bytes == 0 || length.bytes > kMaxProofBytes)
    length.problem = fmt::format("its certificate proof says it holds {} bytes (1 to {} may)",
                                 length.bytes, kMaxProofBytes);
  return length;
}

std::string Certificates::check(std::span<const std::uint8_t> proof,
                                std::span<const std::uint8_t> transcript,
                                const std::string& host) const {
  // Parse: every length inside the proof, nothing after it.
  std::size_t at = 0;
  const auto get16 = [&](std::size_t& v) {
    if (proof.size() - at < 2) return false;
    v = static_cast<std::size_t>(proof[at] | (proof[at + 1] << 8));
    at += 2;
    return proof.size() - at >= v;
  };
  if (proof.size() > kMaxProofBytes) return "its certificate proof is too large";
  if (proof.empty() || proof[0] == 0 || proof[0] > kMaxChain)
    return "its certificate proof is malformed (no certificate, or too many)";
  const std::size_t count = proof[at++];
  Chain chain(sk_X509_new_null());
  for (std::size_t i = 0; i < count; ++i) {
    std::size_t length = 0;
    if (!get16(length)) return "its certificate proof is malformed (a length past its end)";
    const unsigned char* p = proof.data() + at;
    X509* c = d2i_X509(nullptr, &p, static_cast<long>(length));
    if (c == nullptr || p != proof.data() + at + length) {
      X509_free(c);
      ERR_clear_error();
      return "its certificate proof holds something that is not a DER certificate";
    }
    sk_X509_push(chain.get(), c);
    at += length;
  }
  std::size_t signature_length = 0;
  if (!get16(signature_length) || at + signature_length != proof.size())
    return "its certificate proof is malformed (its signature)";
  const auto signature = proof.subspan(at, signature_length);
  X509* leaf = sk_X509_value(chain.get(), 0);

  // The chain, to a trusted authority, naming `host`, valid now.
  X509_STORE_CTX* ctx = X509_STORE_CTX_new();
  std::string why;
  Chain untrusted(sk_X509_new_null());
  for (std::size_t i = 1; i < count; ++i)
    sk_X509_push(untrusted.get(), X509_dup(sk_X509_value(chain.get(), static_cast<int>(i))));
  if (ctx == nullptr || X509_STORE_CTX_init(ctx, impl_->trusted, leaf, untrusted.get()) != 1) {
    why = "cannot check certificates: " + openssl_error();
  } else {
    X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx);
    if (!host.empty()) {
      const bool ip = X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1;
      if (!ip) {
        ERR_clear_error();
        X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
      }
    }
    if (X509_verify_cert(ctx) != 1) {
      const int error = X509_STORE_CTX_get_error(ctx);
      why = fmt::format("its certificate ({}) {}", subject_of(leaf),
                        error == X509_V_ERR_HOSTNAME_MISMATCH || error == X509_V_ERR_IP_ADDRESS_MISMATCH
                            ? fmt::format("does not name {}", host)
                            : fmt::format("is not accepted: {}",
                                          X509_verify_cert_error_string(error)));
    }
  }
  X509_STORE_CTX_free(ctx);
  ERR_clear_error();
  if (!why.empty()) return why;

  // The signature, with the certificate's key.
  EVP_PKEY* key = X509_get0_pubkey(leaf);
  const auto message = signed_message(transcript);
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  const bool ok = key != nullptr && md != nullptr &&
                  EVP_DigestVerifyInit(md, nullptr, digest_for(key), nullptr, key) == 1 &&
                  EVP_DigestVerify(md, signature.data(), signature.size(), message.data(),
                                   message.size()) == 1;
  EVP_MD_CTX_free(md);
  ERR_clear_error();
  if (!ok)
    return fmt::format("its certificate ({}) is good, but its signature does not cover this "
                       "handshake: a proof made for another, or a key it does not hold",
                       subject_of(leaf));
  return "";
}

}  // namespace collie::seal

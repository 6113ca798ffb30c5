// A certificate authority of a test's own (OpenSSL's libcrypto): it makes
// a root (and intermediate authorities), and issues certificates for
// names (IP addresses and DNS names), valid when told, with P-256 or
// Ed25519 keys, written as PEM files in a scratch directory.
#pragma once

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace collie::test {

class TestPki {
 public:
  enum class KeyType { P256, Ed25519 };
  struct Issued {
    std::string cert;  // PEM: the certificate, then the intermediate authorities it needs
    std::string key;   // PEM: its private key
  };

  // A root authority named `name`, its files in `dir`.
  TestPki(std::filesystem::path dir, const std::string& name) : dir_(std::move(dir)) {
    root_ = make(name, {}, true, nullptr, nullptr, KeyType::P256, -60, 86400);
    ca_file = write_cert(name + "-ca.pem", {root_.cert});
  }
  ~TestPki() {
    for (auto& a : {root_, intermediate_}) {
      X509_free(a.cert);
      EVP_PKEY_free(a.key);
    }
  }
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  // Issues a certificate for `names` ("IP:10.77.0.1", "DNS:node1"),
  // valid from `from_s` to `to_s` seconds from now; signed by an
  // intermediate authority (sent with it) when `via_intermediate`.
  Issued issue(const std::string& stem, const std::vector<std::string>& names,
               KeyType type = KeyType::P256, long from_s = -60, long to_s = 86400,
               bool via_intermediate = false) {
    if (via_intermediate && intermediate_.cert == nullptr)
      intermediate_ = make("intermediate", {}, true, root_.cert, root_.key, KeyType::P256, -60,
                           86400);
    const auto& signer = via_intermediate ? intermediate_ : root_;
    auto leaf = make(stem, names, false, signer.cert, signer.key, type, from_s, to_s);
    Issued out;
    std::vector<X509*> chain{leaf.cert};
    if (via_intermediate) chain.push_back(intermediate_.cert);
    out.cert = write_cert(stem + ".pem", chain);
    out.key = (dir_ / (stem + ".key")).string();
    FILE* f = std::fopen(out.key.c_str(), "w");
    if (f == nullptr || PEM_write_PrivateKey(f, leaf.key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
      throw std::runtime_error("cannot write " + out.key);
    std::fclose(f);
    X509_free(leaf.cert);
    EVP_PKEY_free(leaf.key);
    return out;
  }

  std::string ca_file;  // PEM: the root authority

 private:
  struct Authority {
    X509* cert = nullptr;
    EVP_PKEY* key = nullptr;
  };

  Authority make(const std::string& cn, const std::vector<std::string>& names, bool ca,
                 X509* issuer, EVP_PKEY* issuer_key, KeyType type, long from_s, long to_s) {
    Authority a;
    a.key = type == KeyType::P256 ? EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256")
                                  : EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
    a.cert = X509_new();
    if (a.key == nullptr || a.cert == nullptr) throw std::runtime_error("cannot make a key");
    X509_set_version(a.cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(a.cert), serial_++);
    X509_gmtime_adj(X509_getm_notBefore(a.cert), from_s);
    X509_gmtime_adj(X509_getm_notAfter(a.cert), to_s);
    X509_set_pubkey(a.cert, a.key);
    X509_NAME* name = X509_get_subject_name(a.cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    X509_set_issuer_name(a.cert, issuer != nullptr ? X509_get_subject_name(issuer) : name);
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, issuer != nullptr ? issuer : a.cert, a.cert, nullptr, nullptr, 0);
    const auto add = [&](int nid, const std::string& value) {
      X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
      if (e == nullptr) throw std::runtime_error("bad extension " + value);
      X509_add_ext(a.cert, e, -1);
      X509_EXTENSION_free(e);
    };
    add(NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
    if (ca) add(NID_key_usage, "critical,keyCertSign,cRLSign");
    if (!names.empty()) {
      std::string san;
      for (const auto& n : names)
        san += (san.empty() ? "" : ",") + n;
      add(NID_subject_alt_name, san);
    }
    EVP_PKEY* signer = issuer_key != nullptr ? issuer_key : a.key;
    const EVP_MD* md = EVP_PKEY_get_base_id(signer) == EVP_PKEY_ED25519 ? nullptr : EVP_sha256();
    if (X509_sign(a.cert, signer, md) == 0) throw std::runtime_error("cannot sign " + cn);
    return a;
  }

  std::string write_cert(const std::string& file, const std::vector<X509*>& chain) {
    const auto path = (dir_ / file).string();
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) throw std::runtime_error("cannot write " + path);
    for (X509* c : chain)
      PEM_write_X509(f, c);
    std::fclose(f);
    return path;
  }

  std::filesystem::path dir_;
  Authority root_;
  Authority intermediate_;
  long serial_ = 1;
};

}  // namespace collie::test

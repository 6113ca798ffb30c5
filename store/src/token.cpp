// A job's secret: from the environment or a file, or a fresh random one
// (client_options.hpp).
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#include <collie/crypto.hpp>
#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/store/client_options.hpp>

namespace collie::store {

std::string token_from_environment(
    const std::function<std::optional<std::string>(std::string_view)>& lookup) {
  auto get = [&](const environment::Variable& v) -> std::string {
    if (lookup) return lookup(v.name).value_or("");
    return environment::get(v).value_or("");
  };
  if (auto token = get(environment::kStoreToken); !token.empty()) return token;
  if (auto file = get(environment::kStoreTokenFile); !file.empty()) return read_token_file(file);
  return std::string();
}

seal::Mode seal_from_environment(
    const std::function<std::optional<std::string>(std::string_view)>& lookup) {
  const auto word = lookup ? lookup(environment::kSeal.name) : environment::get(environment::kSeal);
  return seal::mode_of(word.value_or("auto"));
}

std::shared_ptr<const seal::Certificates> certificates_from_environment() {
  const auto get = [](const environment::Variable& v) {
    return environment::get(v).value_or("");
  };
  const auto cert = get(environment::kSealCert);
  auto key = get(environment::kSealKey);
  const auto ca = get(environment::kSealCa);
  if (cert.empty() && key.empty() && ca.empty()) return nullptr;
  if (cert.empty() || ca.empty())
    throw Error(fmt::format("{} and {} go together ({} too, unless the key is in the "
                            "certificate's file): set them all, or none",
                            environment::kSealCert.name, environment::kSealCa.name,
                            environment::kSealKey.name));
  if (key.empty()) key = cert;
  // Loaded once for the same files: a launcher makes many clients.
  static std::mutex mu;
  static std::string loaded_from;
  static std::shared_ptr<const seal::Certificates> loaded;
  const auto files = cert + '\n' + key + '\n' + ca;
  std::lock_guard lock(mu);
  if (!loaded || loaded_from != files) {
    loaded = seal::Certificates::load(cert, key, ca);
    loaded_from = files;
  }
  return loaded;
}

std::string random_token() {
  std::uint8_t bytes[32];
  crypto::random_bytes(bytes);
  std::string hex;
  for (auto b : bytes)
    hex += fmt::format("{:02x}", b);
  return hex;
}

std::string read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read the token file '{}'", path));
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ' ||
                            token.back() == '\t')) {
    token.pop_back();
  }
  if (token.empty()) throw Error(fmt::format("the token file '{}' is empty", path));
  return token;
}

}  // namespace collie::store

// A job's secret: from the environment or a file, or a fresh random one
// (client_options.hpp).
#include <cstdlib>
#include <fstream>
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
  return seal::Certificates::from_settings(get(environment::kSealCert),
                                           get(environment::kSealKey), get(environment::kSealCa));
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

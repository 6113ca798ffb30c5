#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/store/client_options.hpp>

namespace collie::store {

std::string token_from_environment() {
  const char* token = std::getenv("COLLIE_STORE_TOKEN");
  if (token != nullptr && *token != '\0') return token;
  const char* file = std::getenv("COLLIE_STORE_TOKEN_FILE");
  if (file != nullptr && *file != '\0') return read_token_file(file);
  return std::string();
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

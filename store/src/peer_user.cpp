// Which user owns the other end of a loopback TCP connection, from
// /proc/net/tcp (peer_user.hpp).
#include "peer_user.hpp"

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace collie::store {

namespace {

// An address and port as the tables write them: the address's bytes in
// memory order, 32 bits at a time, each printed as a native (here
// little-endian) integer in hex; the port in hex.
std::string table_form(const asio::ip::tcp::endpoint& e, bool v6_table) {
  std::array<unsigned char, 16> bytes{};
  std::size_t n = 0;
  if (e.address().is_v4() && !v6_table) {
    const auto b = e.address().to_v4().to_bytes();
    std::copy(b.begin(), b.end(), bytes.begin());
    n = 4;
  } else {
    const auto v6 = e.address().is_v4()
                        ? asio::ip::make_address_v6(asio::ip::v4_mapped, e.address().to_v4())
                        : e.address().to_v6();
    const auto b = v6.to_bytes();
    std::copy(b.begin(), b.end(), bytes.begin());
    n = 16;
  }
  std::string out;
  char word[9];
  for (std::size_t i = 0; i < n; i += 4) {
    const std::uint32_t w = static_cast<std::uint32_t>(bytes[i]) |
                            static_cast<std::uint32_t>(bytes[i + 1]) << 8 |
                            static_cast<std::uint32_t>(bytes[i + 2]) << 16 |
                            static_cast<std::uint32_t>(bytes[i + 3]) << 24;
    std::snprintf(word, sizeof word, "%08X", w);
    out += word;
  }
  char port[6];
  std::snprintf(port, sizeof port, "%04X", static_cast<unsigned>(e.port()));
  return out + ":" + port;
}

std::optional<uid_t> find(const std::string& table, const std::string& peer,
                          const std::string& local) {
  std::istringstream in(table);
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string slot, own, remote, state, queues, timer, retransmits;
    long long uid = -1;
    if (!(fields >> slot >> own >> remote >> state >> queues >> timer >> retransmits >> uid))
      continue;
    if (own == peer && remote == local && uid >= 0) return static_cast<uid_t>(uid);
  }
  return std::nullopt;
}

std::string slurp(const char* path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

std::optional<uid_t> peer_user_in(const std::string& tcp, const std::string& tcp6,
                                  const asio::ip::tcp::endpoint& local,
                                  const asio::ip::tcp::endpoint& peer) {
  // A v4-mapped address (a dual-stack server) is the v4 socket's.
  auto plain = [](const asio::ip::tcp::endpoint& e) {
    if (e.address().is_v6() && e.address().to_v6().is_v4_mapped())
      return asio::ip::tcp::endpoint(
          asio::ip::make_address_v4(asio::ip::v4_mapped, e.address().to_v6()), e.port());
    return e;
  };
  const auto l = plain(local), p = plain(peer);
  if (p.address().is_v4()) {
    if (auto uid = find(tcp, table_form(p, false), table_form(l, false))) return uid;
  }
  return find(tcp6, table_form(p, true), table_form(l, true));
}

std::optional<uid_t> peer_user(const asio::ip::tcp::endpoint& local,
                               const asio::ip::tcp::endpoint& peer) {
  return peer_user_in(slurp("/proc/net/tcp"), slurp("/proc/net/tcp6"), local, peer);
}

}  // namespace collie::store

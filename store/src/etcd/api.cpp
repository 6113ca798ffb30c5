// etcd's v3 API as JSON (api.hpp).
#include "api.hpp"

#include <array>
#include <charconv>

#include <collie/error.hpp>

namespace collie::store::etcd {

namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<std::int8_t, 256> decode_table() {
  std::array<std::int8_t, 256> t{};
  for (auto& v : t)
    v = -1;
  for (std::size_t i = 0; i < kAlphabet.size(); ++i)
    t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
  return t;
}

}  // namespace

std::string base64(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const auto n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16 |
                   static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8 |
                   static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += kAlphabet[n >> 6 & 63];
    out += kAlphabet[n & 63];
  }
  if (const auto rest = bytes.size() - i; rest > 0) {
    std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) n |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out += kAlphabet[n >> 18 & 63];
    out += kAlphabet[n >> 12 & 63];
    out += rest == 2 ? kAlphabet[n >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

std::string unbase64(std::string_view text) {
  static constexpr auto table = decode_table();
  std::string out;
  out.reserve(text.size() / 4 * 3);
  std::uint32_t bits = 0;
  int have = 0;
  std::size_t padding = 0;
  for (const char c : text) {
    if (c == '=') {
      ++padding;
      continue;
    }
    const auto v = table[static_cast<unsigned char>(c)];
    if (v < 0 || padding > 0) throw ProtocolError("etcd store: etcd sent a key or value that is not base64");
    bits = bits << 6 | static_cast<std::uint32_t>(v);
    have += 6;
    if (have >= 8) {
      have -= 8;
      out += static_cast<char>(bits >> have & 0xff);
    }
  }
  if (padding > 2 || (text.size() % 4) != 0)
    throw ProtocolError("etcd store: etcd sent a key or value that is not base64");
  return out;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

ErrorReply error_of(const Json& reply) {
  ErrorReply e;
  if (!reply.is_object()) return e;
  const auto text = [](const Json& j, const char* field) {
    const auto it = j.find(field);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const auto code = [](const Json& j, const char* field) {
    const auto it = j.find(field);
    return it != j.end() && it->is_number_integer() ? it->get<int>() : 0;
  };
  const auto inner = reply.find("error");
  if (inner != reply.end() && inner->is_object()) {
    e.code = code(*inner, "grpc_code");
    e.message = text(*inner, "message");
    return e;
  }
  e.code = code(reply, "code");
  e.message = text(reply, "message");
  if (e.message.empty()) e.message = text(reply, "error");
  return e;
}

std::int64_t number(const Json& object, const char* field) {
  const auto it = object.find(field);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<std::int64_t>();
  if (it->is_string()) {
    const auto& s = it->get_ref<const std::string&>();
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size()) return v;
  }
  throw ProtocolError(std::string("etcd store: etcd sent a reply whose '") + field +
                      "' is not a number");
}

Range parse_range(const Json& reply) {
  Range r;
  r.count = number(reply, "count");
  if (const auto it = reply.find("kvs"); it != reply.end()) {
    for (const auto& kv : *it) {
      KeyValue k;
      k.key = unbase64(kv.value("key", ""));
      k.value = unbase64(kv.value("value", ""));
      k.mod_revision = number(kv, "mod_revision");
      k.lease = number(kv, "lease");
      r.kvs.push_back(std::move(k));
    }
  }
  return r;
}

std::int64_t revision_of(const Json& reply) {
  const auto it = reply.find("header");
  return it == reply.end() ? 0 : number(*it, "revision");
}

Json range_request(std::string_view key, std::string_view range_end, bool count_only,
                   bool keys_only) {
  Json r{{"key", base64(key)}};
  if (!range_end.empty()) r["range_end"] = base64(range_end);
  if (count_only) r["count_only"] = true;
  if (keys_only) r["keys_only"] = true;
  return r;
}

Json put_request(std::string_view key, std::string_view value, std::int64_t lease) {
  Json r{{"key", base64(key)}, {"value", base64(value)}};
  if (lease != 0) r["lease"] = std::to_string(lease);
  return r;
}

Json delete_request(std::string_view key, std::string_view range_end) {
  Json r{{"key", base64(key)}};
  if (!range_end.empty()) r["range_end"] = base64(range_end);
  return r;
}

Json op_range(Json request) { return Json{{"request_range", std::move(request)}}; }
Json op_put(Json request) { return Json{{"request_put", std::move(request)}}; }
Json op_delete(Json request) { return Json{{"request_delete_range", std::move(request)}}; }

Json compare_mod(std::string_view key, std::int64_t revision) {
  return Json{{"key", base64(key)},
              {"target", "MOD"},
              {"result", "EQUAL"},
              {"mod_revision", std::to_string(revision)}};
}

Json txn(Json compares, Json success, Json failure) {
  return Json{{"compare", std::move(compares)},
              {"success", std::move(success)},
              {"failure", std::move(failure)}};
}

bool succeeded(const Json& reply) { return reply.value("succeeded", false); }

const Json& responses(const Json& reply) {
  static const Json none = Json::array();
  const auto it = reply.find("responses");
  return it == reply.end() ? none : *it;
}

Json watch_request(std::string_view key, std::string_view range_end,
                   std::int64_t start_revision) {
  Json create{{"key", base64(key)}, {"start_revision", std::to_string(start_revision)}};
  if (!range_end.empty()) create["range_end"] = base64(range_end);
  return Json{{"create_request", std::move(create)}};
}

}  // namespace collie::store::etcd

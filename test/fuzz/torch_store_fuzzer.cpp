// libFuzzer target: the bytes a torch TCPStore client can send collie's
// store (`collie store serve --torch`), through the dialect's parser.
//
// The first input byte picks the dialect (even: torch 1.x, odd: 2.x); the
// rest is a byte stream fed in the read sizes a network would give, parsed
// query after query with tight limits. Invariants: nothing crashes or reads
// out of bounds (ASan/UBSan); a parsed query took bytes that are there, at
// least its type byte; its keys and values are within the limits; the same
// bytes, parsed again from the start of that query, give the same query;
// its translation into the store's request keeps its keys and values, and
// rewriting any bytes as that request's reply (the rest of the input)
// neither crashes nor reads past them, and gives a reply with bytes (but
// for multi_get of no keys).
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "torch_dialect.hpp"

using namespace collie::store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto dialect = data[0] % 2 == 0 ? torch::Dialect::V1 : torch::Dialect::V2;
  StoreLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 256;
  limits.max_keys_per_request = 16;
  limits.max_message_bytes = 4096;
  std::vector<std::uint8_t> buffer;
  std::size_t fed = 1;
  while (fed < size) {
    const std::size_t n = std::min<std::size_t>(size - fed, 1 + data[fed] % 61u);
    buffer.insert(buffer.end(), data + fed, data + fed + n);
    fed += n;
    while (!buffer.empty()) {
      torch::Query q;
      const auto p = torch::parse(dialect, buffer, limits, q);
      if (p.result == torch::Parse::NeedMore) break;
      if (p.result != torch::Parse::Done) return 0;  // the server closes here
      if (p.used == 0 || p.used > buffer.size()) std::abort();
      for (const auto& k : q.keys)
        if (k.size() > limits.max_key_bytes) std::abort();
      for (const auto& v : q.values)
        if (v.size() > limits.max_value_bytes) std::abort();
      torch::Query again;
      const auto p2 = torch::parse(
          dialect, std::span<const std::uint8_t>(buffer.data(), p.used), limits, again);
      if (p2.result != torch::Parse::Done || p2.used != p.used || again.keys != q.keys ||
          again.values != q.values || again.command != q.command || again.number != q.number ||
          again.word != q.word) {
        std::abort();
      }
      const auto t = torch::translate(q, 7);
      if (t.kind == torch::Translation::Kind::Request) {
        if (t.request.id != 7) std::abort();
        (void)wire::check_limits(t.request, limits);  // the server refuses, or runs it
        if (t.request.values.size() != q.values.size()) std::abort();
        for (std::size_t i = 0; i < q.keys.size(); ++i)
          if (t.request.keys[i] != q.keys[i]) std::abort();
      }
      const auto reply = std::span<const std::uint8_t>(buffer).subspan(p.used);
      const std::string expected = q.values.empty() ? std::string() : q.values.front();
      const auto rewrite = torch::rewrite_reply(reply, q.command, expected);
      // Every reply has bytes, but multi_get's of no keys (torch sends one
      // value per key, no count).
      if (rewrite.kind == torch::Rewrite::Kind::Reply && rewrite.reply.empty() &&
          q.command != torch::Command::MultiGet)
        std::abort();
      if (const auto id = torch::reply_id(reply); id && reply.size() < wire::kFrameHeaderBytes + 5)
        std::abort();
      buffer.erase(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(p.used));
    }
  }
  return 0;
}

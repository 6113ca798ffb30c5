// etcd's v3 API as JSON: the requests the etcd store sends to the gateway
// (range, put, delete, transactions, watch, leases) and what it reads from
// the replies. Keys and values travel in base64; 64-bit numbers come back
// as strings; fields at their zero value are left out of replies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace collie::store::etcd {

using Json = nlohmann::json;

// Operations etcd takes in one transaction (its --max-txn-ops default).
inline constexpr std::size_t kMaxTxnOps = 128;

std::string base64(std::string_view bytes);
// Throws ProtocolError on text that is not base64.
std::string unbase64(std::string_view text);

// The first key after every key that starts with `prefix` (etcd's
// range_end for a prefix).
std::string prefix_end(std::string_view prefix);

// An error reply's gRPC code and message: {"code":14,"message":"..."} from a
// call, {"error":{"grpc_code":14,"message":"..."}} from a stream; 0 and ""
// when `reply` is no error.
struct ErrorReply {
  int code = 0;
  std::string message;
};
ErrorReply error_of(const Json& reply);

// A number etcd sent as a string or a number; 0 when absent.
std::int64_t number(const Json& object, const char* field);

struct KeyValue {
  std::string key;
  std::string value;
  std::int64_t mod_revision = 0;
  std::int64_t lease = 0;
};

// The kvs of a range reply (or a txn's response_range); count.
struct Range {
  std::vector<KeyValue> kvs;
  std::int64_t count = 0;
};
Range parse_range(const Json& reply);
// The revision in a reply's header.
std::int64_t revision_of(const Json& reply);

// Requests (the bodies, or a txn's operations).
Json range_request(std::string_view key, std::string_view range_end = {}, bool count_only = false,
                   bool keys_only = false);
Json put_request(std::string_view key, std::string_view value, std::int64_t lease = 0);
Json delete_request(std::string_view key, std::string_view range_end = {});

// A transaction's operation, from a request above.
Json op_range(Json request);
Json op_put(Json request);
Json op_delete(Json request);

// A comparison: the key's mod_revision equals `revision` (0: the key is missing).
Json compare_mod(std::string_view key, std::int64_t revision);

Json txn(Json compares, Json success, Json failure = Json::array());
// Whether a txn reply says its comparisons held; its responses.
bool succeeded(const Json& reply);
const Json& responses(const Json& reply);

// The first line of a watch: from `start_revision` on, the keys in [key, range_end).
Json watch_request(std::string_view key, std::string_view range_end, std::int64_t start_revision);

}  // namespace collie::store::etcd

// Every COLLIE_* variable collie reads, as one table: its name, what it
// holds, its default, what it accepts and what it means. The code that
// reads a variable names it through its entry here and parses it with the
// entry's rules (the helpers below), so a refusal always reads alike
// ("COLLIE_TIMEOUT='soon': takes seconds, more than 0; default 300");
// `collie --help` lists the table, and docs/environment.md is the table
// (a test fails when the page and the table differ).
//
// Torchrun's, Slurm's and Open MPI's variables (MASTER_ADDR, RANK, ...) are
// the launchers' vocabulary, not collie's settings: job_config.hpp reads
// them, and docs/environment.md lists them apart.
//
// Thread-safety: the table is constant; the helpers keep no state.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace collie::environment {

// How a value is written, and so how it is checked.
enum class Kind : unsigned char {
  Text,     // free text; `type` and `accepts` say what it must be
  Choice,   // one of the words of `accepts` ("auto, tcp, shm")
  Seconds,  // a number of seconds, within [low, high]
  Bytes,    // a size (size_in_bytes()), within [low, high]
  Integer,  // a whole number, within [low, high]
};

struct Variable {
  std::string_view name;
  Kind kind = Kind::Text;
  std::string_view type;     // what it holds ("seconds", "GBITS[,LATENCY_US]")
  std::string_view fallback; // its default as it would be written; "" where none
  std::string_view accepts;  // Text and Choice: what it accepts; numeric kinds: see range()
  double low = 0;            // numeric kinds: the least value accepted
  double high = -1;          // numeric kinds: the most (below `low`: no limit)
  bool low_excluded = false; // numeric kinds: `low` itself is refused ("more than 0")
  std::string_view meaning;  // markdown, as docs/environment.md shows it
};

// clang-format off
inline constexpr Variable kStoreToken{
    "COLLIE_STORE_TOKEN", Kind::Text, "text", "", "any text",
    0, -1, false,
    "the job's shared secret: the store and the ranks' handshakes check it (`collie launch` "
    "sets it for its ranks; on one node a random one)"};
inline constexpr Variable kStoreTokenFile{
    "COLLIE_STORE_TOKEN_FILE", Kind::Text, "path", "", "a readable file",
    0, -1, false,
    "a file holding that secret, read when `COLLIE_STORE_TOKEN` is unset"};
inline constexpr Variable kInitMethod{
    "COLLIE_INIT_METHOD", Kind::Text, "URL", "",
    "env://, tcp://HOST:PORT, file:///PATH, etcd://HOST:PORT[,HOST:PORT...]/JOB",
    0, -1, false,
    "how ranks meet when the program leaves `InitOptions::init_method` at env:// (unset: "
    "env://); `collie launch` clears it for its ranks"};
inline constexpr Variable kEtcdCacert{
    "COLLIE_ETCD_CACERT", Kind::Text, "path", "", "a readable PEM file",
    0, -1, false,
    "with an etcd store (`etcd://`, `--rdzv_backend etcd`): the CA that signed etcd's "
    "certificates (unset: the system's)"};
inline constexpr Variable kEtcdCert{
    "COLLIE_ETCD_CERT", Kind::Text, "path", "", "a readable PEM file",
    0, -1, false,
    "with an etcd store: this client's certificate, which etcd's `--client-cert-auth` checks"};
inline constexpr Variable kEtcdKey{
    "COLLIE_ETCD_KEY", Kind::Text, "path", "", "a readable PEM file",
    0, -1, false,
    "with an etcd store: the private key of `COLLIE_ETCD_CERT`"};
inline constexpr Variable kEtcdInsecure{
    "COLLIE_ETCD_INSECURE", Kind::Choice, "choice", "0", "0, 1",
    0, -1, false,
    "1: reach etcd over plain HTTP without certificates (anyone who reaches etcd can then read "
    "and change the job's keys; said once on standard error)"};
inline constexpr Variable kLogLevel{
    "COLLIE_LOG_LEVEL", Kind::Choice, "choice", "warn", "off, error, warn, info, debug, trace",
    0, -1, false,
    "how much collie logs to standard error"};
inline constexpr Variable kTimeout{
    "COLLIE_TIMEOUT", Kind::Seconds, "seconds", "300", "",
    0, -1, true,
    "how long every blocking call of a job may take"};
inline constexpr Variable kStallTime{
    "COLLIE_STALL_TIME", Kind::Seconds, "seconds", "30", "",
    0, -1, false,
    "how long a collective waits before the stall inspector asks every rank where it is and "
    "logs who holds the call up (`0`: off); [failures.md](failures.md)"};
inline constexpr Variable kAsyncCalls{
    "COLLIE_ASYNC_CALLS", Kind::Integer, "count", "2", "",
    1, 16, false,
    "how many of a group's async collectives (`*_async`) run at once, each on a thread of the "
    "group's, started in call order, each finishing when its own messages are done (so a small "
    "call behind a large one need not wait for it); `1`: one at a time, finishing in call "
    "order; [collectives.md](collectives.md)"};
inline constexpr Variable kPortRange{
    "COLLIE_PORT_RANGE", Kind::Text, "LOW-HIGH", "20000-29999", "ports from 1 to 65535, LOW <= HIGH",
    0, -1, false,
    "under `srun` or `mpirun` without `MASTER_PORT`: the range the store's port is derived in "
    "from the job's id; [slurm.md](slurm.md)"};
inline constexpr Variable kAlgo{
    "COLLIE_ALGO", Kind::Text, "COLLECTIVE:ALGORITHM[:BYTES][:ranks=RANKS],...", "",
    "as all_reduce:recursive_doubling:0-64K,all_reduce:ring:64K-,broadcast:tree",
    0, -1, false,
    "the algorithm per collective, by call size (LOW-HIGH bytes per rank, HIGH out; K, M, G) "
    "and group size (ranks=LOW-HIGH, both in), the first rule that covers a call deciding "
    "(unset, or no rule covers it: Auto chooses; the map is logged at info level; names and "
    "grammar in [collectives.md](collectives.md)); the same on every rank"};
inline constexpr Variable kHostLink{
    "COLLIE_HOST_LINK", Kind::Text, "GBITS[,LATENCY_US]", "",
    "1 is 1 Gbit/s; 25,5 is 25 Gbit/s and 5 us (30 where not given)",
    0, -1, false,
    "the link between hosts, for Auto's choice in a group that spans hosts (unset: measured "
    "when the job starts, in about 50 ms on 1 Gbit/s, 120 where COLLIE_STREAMS=auto times 4 "
    "connections too; `collie bench` prints what it found)"};
inline constexpr Variable kSegmentBytes{
    "COLLIE_SEGMENT_BYTES", Kind::Bytes, "bytes", "256K", "",
    1024, 1 << 30, false,
    "the pipeline segment of large messages; the same on every rank"};
inline constexpr Variable kStageWholeBytes{
    "COLLIE_STAGE_WHOLE_BYTES", Kind::Bytes, "bytes", "4M", "",
    0, 1 << 30, false,
    "CUDA device buffers up to this size are copied to pinned memory whole, larger ones a "
    "segment at a time"};
inline constexpr Variable kStageChunkBytes{
    "COLLIE_STAGE_CHUNK_BYTES", Kind::Bytes, "bytes", "4M", "",
    0, 1 << 30, false,
    "all_reduce, broadcast and reduce on a larger CUDA buffer run in chunks of this size, each "
    "staged whole, the copies of one chunk overlapping the next one's collective (`0`: segment "
    "by segment)"};
inline constexpr Variable kSpinUs{
    "COLLIE_SPIN_US", Kind::Integer, "microseconds", "50", "",
    0, 1000000, false,
    "how long a wait polls its sockets (yielding the CPU between polls) before it sleeps; on "
    "while the yields run other threads, at most 2 ms, and while requests keep finishing, at "
    "most 100 ms; on a machine whose processors other work fills, shared memory's waits do not "
    "spin (a small call on a group's board still does where each rank has a processor), and "
    "where more than one rank per microsecond of it share a processor they yield once and "
    "sleep"};
inline constexpr Variable kTransport{
    "COLLIE_TRANSPORT", Kind::Choice, "choice", "auto", "auto, tcp, shm",
    0, -1, false,
    "what carries messages between ranks of one host: `auto` (shared memory; TCP between "
    "hosts), `tcp`, or `shm` (every rank must be on this host); [transport.md](transport.md)"};
inline constexpr Variable kSeal{
    "COLLIE_SEAL", Kind::Choice, "choice", "auto", "auto, on, off",
    0, -1, false,
    "whether TCP connections between ranks, and to the store, are encrypted and authenticated: "
    "`auto` (between hosts; loopback stays clear), `on` (every one, loopback too) or `off` (none: "
    "for a network you trust; rank 0 says so on standard error). Every rank and the store must "
    "say alike; [security.md](security.md)"};
inline constexpr Variable kSealCert{
    "COLLIE_SEAL_CERT", Kind::Text, "path", "", "a readable PEM file",
    0, -1, false,
    "this host's certificate (then any intermediate ones), signed by the site's authority for "
    "the address its ranks and store listen on: sealed connections between ranks, and to the "
    "store, then prove each end with it, beside the job's secret (every host needs one); "
    "[security.md](security.md)"};
inline constexpr Variable kSealKey{
    "COLLIE_SEAL_KEY", Kind::Text, "path", "", "a readable PEM file",
    0, -1, false,
    "the private key of `COLLIE_SEAL_CERT` (unset: in that file)"};
inline constexpr Variable kSealCa{
    "COLLIE_SEAL_CA", Kind::Text, "path", "", "a readable PEM file",
    0, -1, false,
    "the authorities that sign the hosts' certificates (set with `COLLIE_SEAL_CERT`)"};
inline constexpr Variable kShmSingleCopy{
    "COLLIE_SHM_SINGLE_COPY", Kind::Bytes, "bytes", "0", "",
    0, -1, false,
    "shared memory: messages of at least this size are read straight from the sender's memory "
    "with `process_vm_readv` where the kernel permits it (`0`: never; two copies through a ring "
    "measured faster)"};
inline constexpr Variable kShmStores{
    "COLLIE_SHM_STORES", Kind::Choice, "choice", "auto", "auto, cached, streaming",
    0, -1, false,
    "shared memory: how a sender stores into a ring: `auto` (ordinary stores, or non-temporal "
    "ones where they measure several times faster, as when the two ranks' cores share no cache; "
    "large plain receives use non-temporal stores), `cached` (ordinary stores only) or "
    "`streaming` (non-temporal stores for every piece of 8 KiB or more)"};
inline constexpr Variable kStreams{
    "COLLIE_STREAMS", Kind::Text, "connections", "auto", "auto, or 1 to 16",
    0, -1, false,
    "TCP: the connections (lanes) that carry a rank's messages of 128 KiB or more "
    "to a peer, opened at the first one: each message is cut in chunks of 64 KiB that the lanes "
    "take as their flows drain (a slower flow takes fewer), beside the pair's own connection, "
    "which keeps every header and every smaller message (`1`: that connection alone); `auto`: "
    "as many as the link probe found to pay (1, 4 or 8: one flow measured against 4 together, "
    "and 8 where 4 paid, where the world spans hosts; else 1); [transport.md](transport.md)"};
inline constexpr Variable kHostCpus{
    "COLLIE_HOST_CPUS", Kind::Integer, "processors", "", "",
    1, -1, false,
    "the processors a job's ranks on this host share, counted by the cost model and by shared "
    "memory's waits instead of one rank's CPU affinity (unset: the affinity's); `collie launch` "
    "and `collie bench` set it when they bind each rank to processors of its own (`--bind`)"};
inline constexpr Variable kHostId{
    "COLLIE_HOST_ID", Kind::Text, "text", "", "any text",
    0, -1, false,
    "replaces the host identity ranks compare to choose shared memory (to keep ranks of one "
    "machine apart, as tests do)"};
inline constexpr Variable kTrace{
    "COLLIE_TRACE", Kind::Text, "directory", "", "a directory every rank may write",
    0, -1, false,
    "every rank writes its Chrome trace there (unset: no trace; `collie trace merge DIR` joins "
    "them)"};
inline constexpr Variable kSocketIfname{
    "COLLIE_SOCKET_IFNAME", Kind::Text, "interfaces", "",
    "eth0; eth,ib (prefixes); =eth0 (exact); ^lo,docker (all but)",
    0, -1, false,
    "the interfaces ranks advertise (unset: the one that routes to the master); a loopback "
    "address with the master on another host is an error at init"};
inline constexpr Variable kLaneIfname{
    "COLLIE_LANE_IFNAME", Kind::Text, "interfaces", "auto",
    "auto; none; or as COLLIE_SOCKET_IFNAME",
    0, -1, false,
    "TCP: the other interfaces a pair's lanes may leave from besides the advertised one (a "
    "second NIC): each is listened on and published, and a lane goes over one where the kernel "
    "routes a peer's published address from it; `auto`: every interface's address of the "
    "advertised one's family that is not loopback or link-local; `none`: the advertised one "
    "alone; [transport.md](transport.md)"};
inline constexpr Variable kStoreHosted{
    "COLLIE_STORE_HOSTED", Kind::Choice, "choice", "0", "0, 1",
    0, -1, false,
    "set by `collie launch`: the launcher hosts the store, so rank 0 must not"};
inline constexpr Variable kRestartCount{
    "COLLIE_RESTART_COUNT", Kind::Integer, "count", "0", "",
    0, -1, false,
    "set by `collie launch`: how many times the job's ranks were restarted"};
inline constexpr Variable kJoin{
    "COLLIE_JOIN", Kind::Choice, "choice", "0", "0, 1",
    0, -1, false,
    "1: init() joins a running job as a newcomer, at its members' next `expand()`, instead of "
    "starting one (RANK and WORLD_SIZE are then not needed); `collie launch` sets it for a "
    "replacement"};
// clang-format on

// The table, in the order docs/environment.md shows it.
inline constexpr const Variable* kVariables[] = {
    &kStoreToken,      &kStoreTokenFile,  &kInitMethod,   &kEtcdCacert,    &kEtcdCert,
    &kEtcdKey,         &kEtcdInsecure,    &kLogLevel,     &kTimeout,       &kStallTime,
    &kAsyncCalls,      &kPortRange,       &kAlgo,         &kHostLink,      &kSegmentBytes,
    &kStageWholeBytes, &kStageChunkBytes, &kSpinUs,       &kTransport,     &kSeal,
    &kSealCert,        &kSealKey,         &kSealCa,       &kShmSingleCopy, &kShmStores,
    &kStreams,         &kHostCpus,        &kHostId,       &kTrace,         &kSocketIfname,
    &kLaneIfname,      &kStoreHosted,     &kRestartCount, &kJoin};

// A variable's default as a value, at compile time, so that the structs
// that hold the settings (JobConfig, TransportSettings) start from the
// table itself: the index-th comma-separated number of `fallback` ("10,30"),
// and a size with its K or M ("256K").
constexpr double default_number(const Variable& v, int index = 0) {
  std::string_view text = v.fallback;
  for (int i = 0; i < index; ++i) text.remove_prefix(text.find(',') + 1);
  double value = 0;
  std::size_t at = 0;
  for (; at < text.size() && text[at] >= '0' && text[at] <= '9'; ++at)
    value = value * 10 + (text[at] - '0');
  return value;
}
constexpr std::size_t default_bytes(const Variable& v) {
  const auto unit = v.fallback.empty() ? '\0' : v.fallback.back();
  const auto value = static_cast<std::size_t>(default_number(v));
  return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : value;
}

// What a variable accepts, in words: Text and Choice, `accepts`; a number,
// its range ("more than 0", "1K to 1G", "0 or more").
std::string range(const Variable& v);

// The table's row of `v` in docs/environment.md:
// "| `NAME` | type | default | range | meaning |" ("-" for no default).
std::string markdown_row(const Variable& v);

// Looks up one environment variable (nullopt when unset or empty).
std::optional<std::string> get(const Variable& v);

// What a variable takes, for messages: "one of auto, tcp, shm",
// "seconds, more than 0", "LOW-HIGH (ports from 1 to 65535, LOW <= HIGH)".
std::string takes(const Variable& v);

// The refusal every parser throws (collie::Error), led by `who`
// ("collie::init"): "who: NAME='text': takes TAKES; default D".
[[noreturn]] void refuse(const Variable& v, std::string_view text, std::string_view who);

// A size as every setting and rule writes it: a whole number with an
// optional unit, K or KiB, M or MiB, G or GiB (1024-based; k, m, g too) or
// B; nullopt where `text` is not one, or overflows. bytes() and the
// selection rules' ranges (collectives/selection.hpp) read sizes with it.
std::optional<std::size_t> size_in_bytes(std::string_view text);

// `text` read as `v` says, or refuse()d. seconds(): milliseconds, rounded up.
long long seconds_in_ms(const Variable& v, std::string_view text, std::string_view who);
std::size_t bytes(const Variable& v, std::string_view text, std::string_view who);
long long integer(const Variable& v, std::string_view text, std::string_view who);
// One of a Choice's words.
std::string choice(const Variable& v, std::string_view text, std::string_view who);

}  // namespace collie::environment

// FileStore: the Store interface over a shared file, across threads and
// processes.
#include <atomic>
#include <fcntl.h>
#include <filesystem>
#include <future>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/store/file_store.hpp>
#include <collie/store/prefix_store.hpp>

#include "support/eventually.hpp"
#include "support/scratch_dir.hpp"

using namespace std::chrono_literals;
using collie::store::FileStore;

namespace {

// A store file in a scratch directory that goes away with it.
struct ScratchFile {
  collie::test::ScratchDir dir;
  std::string path = dir.file("store");
};

}  // namespace

TEST_CASE("file store: every operation", "[file_store]") {
  ScratchFile file;
  FileStore s(file.path, 5s);
  CHECK(s.timeout() == 5s);
  s.set("k", "v");
  CHECK(s.get("k") == "v");
  s.set("", std::string("\0bin\xff", 5));
  CHECK(s.get("") == std::string("\0bin\xff", 5));
  CHECK(s.try_get("none") == std::nullopt);
  CHECK(s.add("n", 5) == 5);
  CHECK(s.add("n", -7) == -2);
  CHECK(s.get("n") == "-2");
  CHECK_THROWS_WITH(s.add("k", 1), ContainsSubstring("not a decimal int64"));
  s.set("max", std::to_string(INT64_MAX));
  CHECK_THROWS_WITH(s.add("max", 1), ContainsSubstring("overflows"));
  CHECK_FALSE(s.compare_set("c", "x", "y").swapped);
  CHECK(s.compare_set("c", "", "first").swapped);
  CHECK_FALSE(s.compare_set("c", "", "second").swapped);
  CHECK(s.compare_set("c", "first", "third").current == std::optional<std::string>("third"));
  CHECK(s.check({"k", "n"}));
  CHECK_FALSE(s.check({"k", "zz"}));
  CHECK(s.delete_key("c"));
  CHECK_FALSE(s.delete_key("c"));
  s.multi_set({"m/a", "m/b"}, {"1", "2"});
  CHECK(s.multi_get({"m/b", "m/a"}) == std::vector<std::string>{"2", "1"});
  CHECK_THROWS_AS(s.multi_set({"a"}, {}), collie::ArgumentError);
  s.append("log", "a");
  s.append("log", "b");
  CHECK(s.get("log") == "ab");
  CHECK(s.count_keys("m/") == 2);
  CHECK(s.list_keys("m/") == std::vector<std::string>{"m/a", "m/b"});
  CHECK(s.num_keys() == 7);  // k, "", n, max, m/a, m/b, log
  s.wait({"k", "n"});
  s.barrier("solo", 1);
  CHECK_THROWS_AS(s.barrier("zero", 0), collie::RequestError);
  CHECK_THROWS_AS(s.set(std::string(5000, 'k'), "v"), collie::RequestError);
}

TEST_CASE("file store: blocking calls wait for other writers, then time out", "[file_store]") {
  ScratchFile file;
  FileStore reader(file.path);
  FileStore writer(file.path);
  // The reader is on its way into get before the writer writes.
  std::atomic<bool> reading{false};
  auto got = std::async(std::launch::async, [&] {
    reading = true;
    return reader.get("b", 10s);
  });
  REQUIRE(collie::test::eventually([&] { return reading.load(); }));
  writer.multi_set({"a", "b"}, {"1", "2"});
  CHECK(got.get() == "2");
  CHECK(reader.multi_get({"a", "b"}) == std::vector<std::string>{"1", "2"});
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(reader.get("never", 200ms), ContainsSubstring("get('never')") &&
                                                    ContainsSubstring("timed out after 200 ms") &&
                                                    ContainsSubstring(file.path));
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  CHECK_THROWS_AS(reader.wait({"a", "never"}, 100ms), collie::TimeoutError);
}

TEST_CASE("file store: adds from several processes are atomic", "[file_store]") {
  ScratchFile file;
  constexpr int kProcesses = 4;
  constexpr int kAdds = 2000;  // enough interleaving that a missing lock loses some
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 0;
      try {
        FileStore s(file.path);
        for (int i = 0; i < kAdds; ++i)
          s.add("counter", 1);
        s.barrier("done", kProcesses, 60s);
      } catch (...) {
        code = 1;
      }
      _exit(code);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  FileStore s(file.path);
  CHECK(s.get("counter") == std::to_string(kProcesses * kAdds));
}

TEST_CASE("file store: barriers release together, are reusable, and withdraw on timeout",
          "[file_store]") {
  ScratchFile file;
  FileStore a(file.path), b(file.path), c(file.path);
  CHECK_THROWS_AS(a.barrier("b", 2, 100ms), collie::TimeoutError);
  // a was taken back out: b alone must still wait.
  CHECK_THROWS_AS(b.barrier("b", 2, 100ms), collie::TimeoutError);
  for (int round = 0; round < 3; ++round) {
    auto other = std::async(std::launch::async, [&] { a.barrier("b", 2, 10s); });
    b.barrier("b", 2, 10s);
    other.get();
  }
  // A caller with another n while one waits is refused, naming both.
  // (a's arrival is a record in the file: the file grows when it is in.)
  const auto before = std::filesystem::file_size(file.path);
  auto waiting = std::async(std::launch::async, [&] { a.barrier("m", 3, 1s); });
  REQUIRE(collie::test::eventually([&] { return std::filesystem::file_size(file.path) > before; }));
  CHECK_THROWS_WITH(c.barrier("m", 2, 1s), ContainsSubstring("n=2") && ContainsSubstring("n=3"));
  CHECK_THROWS_AS(waiting.get(), collie::TimeoutError);
  // Once no one waits, the name may be used with another n.
  auto pair = std::async(std::launch::async, [&] { a.barrier("m", 2, 10s); });
  c.barrier("m", 2, 10s);
  pair.get();
}

TEST_CASE("file store: a lock held elsewhere times a call out instead of hanging", "[file_store]") {
  ScratchFile file;
  FileStore s(file.path);
  s.set("k", "v");
  // A child takes the file's lock and keeps it (as a stopped process would).
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t holder = fork();
  REQUIRE(holder >= 0);
  if (holder == 0) {
    const int fd = open(file.path.c_str(), O_RDWR);
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    const char ok = fcntl(fd, F_OFD_SETLKW, &lock) == 0 ? '1' : '0';
    (void)!write(ready[1], &ok, 1);
    pause();
    _exit(0);
  }
  char ok = 0;
  REQUIRE(read(ready[0], &ok, 1) == 1);
  REQUIRE(ok == '1');
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      s.try_get("k", 200ms),
      ContainsSubstring("another process held the file's lock") && ContainsSubstring(file.path));
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  CHECK(s.get("k", 5s) == "v");  // the lock went with the holder
}

TEST_CASE("file store: a prefix view works over it", "[file_store]") {
  ScratchFile file;
  auto root = std::make_shared<FileStore>(file.path);
  collie::store::PrefixStore job(root, "job");
  job.set("x", "1");
  CHECK(root->get("job/x") == "1");
  CHECK(job.num_keys() == 1);
}

TEST_CASE("file store: errors name the file", "[file_store]") {
  CHECK_THROWS_WITH(FileStore("/no/such/dir/store"), ContainsSubstring("/no/such/dir/store"));
  ScratchFile file;
  {
    FileStore s(file.path);
    s.set("k", "v");
  }
  std::filesystem::resize_file(file.path, 5);  // cut a record in half
  FileStore broken(file.path);
  CHECK_THROWS_WITH(broken.try_get("k"), ContainsSubstring("is corrupt"));
}

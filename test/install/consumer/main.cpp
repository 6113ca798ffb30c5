// Embeds a store server and talks to it, then runs a collective in a world
// of one, using only the installed headers.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <collie/collie.hpp>
#include <collie/store/client.hpp>
#include <collie/store/server.hpp>

int main() {
  collie::store::ServerOptions options;
  options.host = "127.0.0.1";
  collie::store::StoreServer server(options);
  collie::store::StoreClient client("127.0.0.1", server.port());
  client.set("hello", "world");
  char dir[] = "/tmp/collie-consumer-XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  collie::InitOptions init;
  init.init_method = std::string("file://") + dir + "/store";
  init.rank = 0;
  init.world_size = 1;
  auto pg = collie::init(init);
  std::vector<float> v = {1.5f, 2.5f};
  pg.all_reduce(std::span(v), collie::ReduceOp::Max);
  std::printf("consumer: collie %s stored and read back '%s', all_reduce gave %g\n",
              collie::version(), client.get("hello").c_str(), static_cast<double>(v[1]));
  std::filesystem::remove_all(dir);
  return 0;
}

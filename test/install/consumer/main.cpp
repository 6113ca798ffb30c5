// Embeds a store server and talks to it, using only the installed headers
// (the store's, which bring Asio: collectives_only.cpp is the program that
// runs collectives without them).
#include <cstdio>
#include <string>

#include <collie/store/client.hpp>
#include <collie/store/server.hpp>
#include <collie/version.hpp>

int main() {
  collie::store::ServerOptions options;
  options.host = "127.0.0.1";
  collie::store::StoreServer server(options);
  collie::store::StoreClient client("127.0.0.1", server.port());
  client.set("hello", "world");
  std::printf("consumer: collie %s stored and read back '%s'\n", collie::version(),
              client.get("hello").c_str());
  return 0;
}

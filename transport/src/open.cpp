#include <collie/transport/open.hpp>
#include <collie/transport/tcp.hpp>

namespace collie::transport {

std::shared_ptr<Transport> open_transport(std::shared_ptr<store::Store> store,
                                          const TransportOptions& options) {
  return std::make_shared<TcpTransport>(std::move(store), options);
}

}  // namespace collie::transport

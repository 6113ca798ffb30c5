// Opens a lost lane again (lane_failover.cpp), on a thread of its own.
//
// A sending lane lost where the pair goes on leaves a gap that the lanes
// left cannot always fill: a receiver reads a lane's chunk only once its
// message is begun, so the chunks sent again, queued behind later
// messages' chunks in the lanes left, would wait for a message that waits
// for them. A new connection with the lost lane's number, from an
// interface other than the lost one's, takes its place (the peer's
// listener swaps it in for its lane of that number) and carries the
// chunks sent again first. The thread starts at the first loss and waits
// for the next; connecting runs without the table's lock, up to the
// handshake's timeout. A lane that cannot be opened again is named in a
// warning, and the pair goes on with those left.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "connector.hpp"

namespace collie::transport::tcp {

class Connections;

class LaneKeeper {
 public:
  // `find_address`: a peer's published addresses, as open_lanes() takes them.
  LaneKeeper(Connections& table, std::function<std::string(int peer, Attempt&)> find_address);
  ~LaneKeeper();
  LaneKeeper(const LaneKeeper&) = delete;
  LaneKeeper& operator=(const LaneKeeper&) = delete;

  // A lane was lost (the table's lock may be held): look at what to open.
  void wake();

 private:
  void run();
  void reopen_lost();

  Connections& table_;
  std::function<std::string(int, Attempt&)> find_address_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool work_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace collie::transport::tcp

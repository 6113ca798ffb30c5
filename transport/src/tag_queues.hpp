// Queues by tag, first in first out within a tag: a peer's posted receives,
// and its messages that came before their receive.
//
// A collective's tag is used by one call only, so its queue is made and
// emptied once per message or two. Emptied queues are kept (up to a few) and
// reused for the next tag, map node and deque storage together: without
// that, every message would allocate a map node, a deque's index and its
// first block, and free them again. Shared by every backend (TCP: a peer
// stream's queues; shared memory: a peer's). Not thread-safe: used under
// the backend's lock.
#pragma once

#include <algorithm>
#include <deque>
#include <unordered_map>
#include <vector>

#include <collie/transport/transport.hpp>

namespace collie::transport {

template <class T>
class TagQueues {
 public:
  void push(Tag tag, T item) {
    auto it = map_.find(tag);
    if (it == map_.end()) {
      if (spare_.empty()) {
        it = map_.try_emplace(tag).first;
      } else {
        auto node = std::move(spare_.back());
        spare_.pop_back();
        node.key() = tag;
        it = map_.insert(std::move(node)).position;
      }
    }
    it->second.push_back(std::move(item));
  }

  // The first item queued under `tag` (removed), or an empty T.
  T take_first(Tag tag) {
    auto it = map_.find(tag);
    if (it == map_.end()) return {};
    T first = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) retire(it);
    return first;
  }

  // Removes `item` from `tag`'s queue, wherever it is.
  void erase(Tag tag, const T& item) {
    auto it = map_.find(tag);
    if (it == map_.end()) return;
    std::erase(it->second, item);
    if (it->second.empty()) retire(it);
  }

  // `tag`'s queue (null if it has none).
  // Calls f(tag, item) for every item.
  template <class F>
  void for_each(F f) const {
    for (const auto& [tag, queue] : map_)
      for (const auto& item : queue)
        f(tag, item);
  }

  const std::deque<T>* find(Tag tag) const {
    auto it = map_.find(tag);
    return it == map_.end() ? nullptr : &it->second;
  }

  bool empty() const { return map_.empty(); }

  // Calls f(item) for every item, then removes them all.
  template <class F>
  void drain(F f) {
    for (auto& [tag, q] : map_)
      for (auto& item : q)
        f(item);
    map_.clear();
  }

 private:
  using Map = std::unordered_map<Tag, std::deque<T>>;
  static constexpr std::size_t kSpares = 8;

  void retire(typename Map::iterator it) {
    auto node = map_.extract(it);
    if (spare_.size() < kSpares) spare_.push_back(std::move(node));
  }

  Map map_;  // no empty queue in it
  std::vector<typename Map::node_type> spare_;
};

}  // namespace collie::transport

// Queues by tag, first in first out within a tag: a peer's posted receives,
// and its messages that came before their receive.
//
// A collective's tag is used by one call only, so its queue is made and
// emptied once per message or two. Emptied queues are kept (up to kSpares)
// and reused for the next tag, map node and queue storage together: without
// that, every message would allocate a map node and its queue's slots, and
// free them again. prime() makes kFirstSpares of them at once, so that the
// few tags a rank's next calls queue at a time (a call and the barrier after
// it, and the next call of a peer ahead) never allocate. Shared by every
// backend (TCP: a peer stream's queues; shared memory: a peer's). Not
// thread-safe: used under the backend's lock.
#pragma once

#include <algorithm>
#include <unordered_map>
#include <vector>

#include <collie/transport/transport.hpp>

#include "fifo.hpp"

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
    it->second.erase_value(item);
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

  const Fifo<T>* find(Tag tag) const {
    auto it = map_.find(tag);
    return it == map_.end() ? nullptr : &it->second;
  }

  bool empty() const { return map_.empty(); }

  // Makes kFirstSpares queues ready for the first tags: called once a peer
  // is connected (not when the first message comes, which would allocate
  // in whichever call that happens to be). Later calls do nothing.
  void prime() {
    if (primed_) return;
    primed_ = true;
    spare_.reserve(kSpares);
    map_.reserve(2 * kFirstSpares);
    for (std::size_t i = 0; i < kFirstSpares; ++i) {
      // (Tags far from any a call uses: the node is taken out at once.)
      const Tag key = ~Tag{0} - i;
      map_.try_emplace(key).first->second.push_back(T{});
      auto node = map_.extract(key);
      node.mapped().pop_front();
      spare_.push_back(std::move(node));
    }
  }


  // Calls f(item) for every item, then removes them all.
  template <class F>
  void drain(F f) {
    for (auto& [tag, q] : map_)
      for (auto& item : q)
        f(item);
    map_.clear();
  }

 private:
  using Map = std::unordered_map<Tag, Fifo<T>>;
  // A broadcast's root may run calls ahead of its peers, each queued under
  // its own tag at the peer: the spares cover that many.
  static constexpr std::size_t kSpares = 64;
  static constexpr std::size_t kFirstSpares = 4;

  void retire(typename Map::iterator it) {
    auto node = map_.extract(it);
    if (spare_.size() < kSpares) spare_.push_back(std::move(node));
  }

  Map map_;  // no empty queue in it
  std::vector<typename Map::node_type> spare_;
  bool primed_ = false;
};

}  // namespace collie::transport

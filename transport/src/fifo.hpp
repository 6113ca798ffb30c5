// A first-in first-out queue on a ring of slots that it keeps: what the
// backends queue requests and early messages in. std::deque frees a block
// each time its front passes one and allocates one each time its back
// enters one, so a queue that is pushed and popped once per message
// allocates every few messages forever; this one grows to the most it ever
// held and then allocates nothing. Internal to transport/src.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

namespace collie::transport {

template <class T>
class Fifo {
 public:
  // The slots of a queue's first push: a call's segments from one peer.
  static constexpr std::size_t kFirstSlots = 16;

  template <bool Const>
  class Iter {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = std::conditional_t<Const, const T*, T*>;
    using reference = std::conditional_t<Const, const T&, T&>;
    Iter() = default;
    Iter(std::conditional_t<Const, const Fifo*, Fifo*> f, std::size_t i) : f_(f), i_(i) {}
    reference operator*() const { return f_->at(i_); }
    pointer operator->() const { return &f_->at(i_); }
    Iter& operator++() {
      ++i_;
      return *this;
    }
    Iter operator++(int) {
      Iter old = *this;
      ++i_;
      return old;
    }
    bool operator==(const Iter& o) const { return i_ == o.i_; }
    std::size_t index() const { return i_; }

   private:
    std::conditional_t<Const, const Fifo*, Fifo*> f_ = nullptr;
    std::size_t i_ = 0;  // from the front
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  T& front() { return at(0); }
  const T& front() const { return at(0); }
  T& back() { return at(size_ - 1); }

  void push_back(T item) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) % slots_.size()] = std::move(item);
    ++size_;
  }
  void pop_front() {
    slots_[head_] = T{};  // lets go of what it holds
    head_ = (head_ + 1) % slots_.size();
    --size_;
  }
  void clear() {
    while (!empty())
      pop_front();
  }
  // Removes the item at `it`; the later ones move up.
  void erase(iterator it) {
    for (std::size_t i = it.index(); i + 1 < size_; ++i)
      at(i) = std::move(at(i + 1));
    back() = T{};
    --size_;
  }
  // Removes every item equal to `item`.
  void erase_value(const T& item) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < size_; ++i)
      if (!(at(i) == item)) {
        if (kept != i) at(kept) = std::move(at(i));
        ++kept;
      }
    for (std::size_t i = kept; i < size_; ++i)
      at(i) = T{};
    size_ = kept;
  }

  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size_}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  T& at(std::size_t i) { return slots_[(head_ + i) % slots_.size()]; }
  const T& at(std::size_t i) const { return slots_[(head_ + i) % slots_.size()]; }
  void grow() {
    std::vector<T> bigger(std::max<std::size_t>(kFirstSlots, slots_.size() * 2));
    for (std::size_t i = 0; i < size_; ++i)
      bigger[i] = std::move(at(i));
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace collie::transport

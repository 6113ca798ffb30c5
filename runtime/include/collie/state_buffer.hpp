// StateBuffer: a named buffer of a member's state, which
// ProcessGroup::sync_state() (process_group.hpp) hands to newcomers.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include <collie/dtype.hpp>

namespace collie {

struct StateBuffer {
  std::string name;
  DataType dtype = DataType::Float32;
  void* data = nullptr;
  std::size_t count = 0;  // elements
  template <class T, std::size_t E>
  static StateBuffer of(std::string name, std::span<T, E> buffer) {
    static_assert(!std::is_const_v<T>, "sync_state writes every member's buffer but root's");
    return {std::move(name), dtype_of<T>, buffer.data(), buffer.size()};
  }
};

}  // namespace collie

// Durations as every collie message words them: "300 s", "1.5 s", "250 ms".
// One wording in the store's, the transport's and the runtime's errors, so a
// user comparing two messages compares like with like.
#pragma once

#include <chrono>
#include <string>

namespace collie {

// Whole seconds as "300 s", other durations of a second or more to a tenth
// ("1.5 s"), shorter ones in milliseconds ("250 ms").
std::string describe_duration(std::chrono::milliseconds d);
// Any other duration, the same way (cut to milliseconds).
template <class Rep, class Period>
std::string describe_duration(std::chrono::duration<Rep, Period> d) {
  return describe_duration(std::chrono::duration_cast<std::chrono::milliseconds>(d));
}

}  // namespace collie

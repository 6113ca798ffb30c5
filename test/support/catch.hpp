// The one way a test here includes Catch2, whichever major Debian ships:
// Catch2 2.13 (Debian 12's catch2, one header) or Catch2 3 (Debian 13's, a
// library of headers). third_party/dependencies.cmake finds it and sets
// COLLIE_CATCH2_MAJOR. Tests are written in Catch2 3's names:
// ContainsSubstring, StartsWith, EndsWith (string matchers) and Approx,
// each brought to the global scope here; under Catch2 2 the one name it
// lacks, ContainsSubstring, is its Contains.
#pragma once

#if COLLIE_CATCH2_MAJOR == 3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/catch_tostring.hpp>
#include <catch2/generators/catch_generators_all.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

using Catch::Approx;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;
#elif COLLIE_CATCH2_MAJOR == 2
#include <string>

#include <catch2/catch.hpp>

using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;
// Catch2 3's name for Catch2 2's string Contains.
inline Catch::Matchers::StdString::ContainsMatcher ContainsSubstring(
    const std::string& text, Catch::CaseSensitive::Choice sensitivity = Catch::CaseSensitive::Yes) {
  return Catch::Matchers::Contains(text, sensitivity);
}
#else
#error "COLLIE_CATCH2_MAJOR must be 2 or 3 (third_party/dependencies.cmake sets it)"
#endif

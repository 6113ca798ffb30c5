// Shared-secret authentication: the right token gets in, nothing else does,
// and the error says which side lacks what.
#include "support/catch.hpp"

#include <collie/error.hpp>

#include "support/store_fixture.hpp"

using namespace std::chrono_literals;
using namespace collie::store;
using collie::test::StoreFixture;

namespace {

StoreFixture with_token(const std::string& token) {
  auto options = StoreFixture::loopback();
  options.token = token;
  return StoreFixture(options);
}

ClientOptions token_options(const std::string& token) {
  ClientOptions options;
  options.token = token;
  options.connect_timeout = 5s;
  return options;
}

}  // namespace

TEST_CASE("a client with the server's token is served", "[auth]") {
  auto f = with_token("correct horse battery staple");
  auto c = f.client(token_options("correct horse battery staple"));
  c->set("k", "v");
  CHECK(c->get("k") == "v");
}

TEST_CASE("a client without a token is refused with a clear error", "[auth]") {
  auto f = with_token("s3cret");
  try {
    f.client(token_options(""));
    FAIL("connected without a token");
  } catch (const collie::AuthenticationError& e) {
    CHECK_THAT(e.what(), ContainsSubstring("authentication failed") &&
                             ContainsSubstring("requires a token") &&
                             ContainsSubstring("COLLIE_STORE_TOKEN"));
  }
  auto good = f.client(token_options("s3cret"));
  CHECK(good->num_keys() == 0);
}

TEST_CASE("a client with the wrong token is refused", "[auth]") {
  auto f = with_token("s3cret");
  CHECK_THROWS_AS(f.client(token_options("guess")), collie::AuthenticationError);
  CHECK_THROWS_WITH(f.client(token_options("s3cret ")),
                    ContainsSubstring("refused this client's token"));
}

TEST_CASE("a client with a token refuses a server without one", "[auth]") {
  StoreFixture f;
  CHECK_THROWS_WITH(f.client(token_options("s3cret")), ContainsSubstring("authentication failed") &&
                                                           ContainsSubstring("does not use one"));
}

TEST_CASE("tokens may hold any bytes", "[auth]") {
  const std::string token("\0\xff\n binary", 10);
  auto f = with_token(token);
  auto c = f.client(token_options(token));
  CHECK(c->add("n", 1) == 1);
  CHECK_THROWS_AS(f.client(token_options(std::string("\0\xff\n binarY", 10))),
                  collie::AuthenticationError);
}

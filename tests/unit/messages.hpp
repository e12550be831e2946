// BOOST_CHECK_EXCEPTION predicates on an exception's message, for any unit test (no attnx header: a test of
// one part of the library includes only that part).
#pragma once

#include <boost/test/unit_test.hpp>

#include <exception>
#include <string>
#include <vector>

namespace test_support {

// BOOST_CHECK_EXCEPTION predicates: the message contains every piece / is exactly `text`.
inline auto says(std::vector<std::string> pieces) {
  return [pieces](const std::exception& e) {
    const std::string what = e.what();
    for (const auto& p : pieces)
      if (what.find(p) == std::string::npos) {
        BOOST_TEST_MESSAGE("the message \"" << what << "\" lacks \"" << p << "\"");
        return false;
      }
    return true;
  };
}
inline auto is(std::string text) {
  return [text](const std::exception& e) {
    if (text == e.what()) return true;
    BOOST_TEST_MESSAGE("the message is \"" << e.what() << "\", expected \"" << text << "\"");
    return false;
  };
}

// f() must throw an Ex, which is also a Base (the library's error type of that part), with exactly `message`.
template <class Ex, class Base, class F>
void throws_exactly(F&& f, const std::string& message) {
  try {
    f();
    BOOST_ERROR("no exception thrown, expected: " << message);
  } catch (const Ex& e) {
    BOOST_TEST(std::string(e.what()) == message);
    BOOST_TEST((dynamic_cast<const Base*>(&e) != nullptr));
  } catch (const std::exception& e) {
    BOOST_ERROR("wrong exception type: " << e.what());
  }
}

}  // namespace test_support

// What an exception says: the message of one a check expects, or of one that escaped where
// none should have (from a worker thread, say, where a Catch2 assertion must not run).
#pragma once
#include <catch2/catch.hpp>
#include <exception>
#include <string>

namespace metajit_test {

// Runs `f`, which must throw an E, and returns E's message; ends the test case with a failure
// when it does not.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception, none was thrown");
  return {};
}

// Runs `f` and returns "" when it returns normally, else a description of what it threw.
// Catches everything: safe to call where no Catch2 macro may run (a worker thread).
template <class F>
std::string thrown_message(F&& f) {
  try {
    f();
    return {};
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return what.empty() ? "an exception with an empty message" : what;
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace metajit_test

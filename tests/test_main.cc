// Catch2's main, after setting the environment every test of a run shares: one kernel cache
// per build tree, the CLI and helper programs of this build, two compiler jobs. CTest's
// ENVIRONMENT property would be the natural place, but catch_discover_tests (Catch2 v2) keeps
// only the first entry of a list, so the build passes them here and a variable already set
// (by a person running one test by hand) wins.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdlib>

int main(int argc, char* argv[]) {
  ::setenv("METAJIT_CACHE_DIR", METAJIT_TEST_CACHE_DIR, 0);
  ::setenv("METAJIT_CLI", METAJIT_TEST_CLI, 0);
  ::setenv("METAJIT_TEST_PROGRAMS", METAJIT_TEST_PROGRAMS_DIR, 0);
  ::setenv("METAJIT_SOURCE_DIR", METAJIT_TEST_SOURCE_DIR, 0);
  ::setenv("METAJIT_JOBS", "2", 0);
  return Catch::Session().run(argc, argv);
}

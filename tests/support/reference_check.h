// Test assertions on support/reference_compare.h: every Var must agree with the reference.
#pragma once
#include <metajit/metajit.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "support/reference_compare.h"

// Evaluates `vars` with the reference interpreter and with eval() and checks that they agree,
// reporting each Var that does not.
inline void check_against_reference(const std::vector<metajit::Var>& vars) {
  const std::vector<std::string> mismatches = metajit_test::reference_mismatches(vars);
  for (const std::string& m : mismatches) FAIL_CHECK(m);
  CHECK(mismatches.empty());
}

inline void check_against_reference(const metajit::Var& var) {
  check_against_reference(std::vector<metajit::Var>{var});
}

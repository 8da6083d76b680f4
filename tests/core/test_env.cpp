// The registry of environment variables (core/env.h): every variable once,
// in the order of its Var, documented; unset and empty read as the default;
// integers are checked, with the variable named. That no code reads a
// PARALLM_* variable around the registry is .ci/check-layers' part.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "core/env.h"
#include "core/error.h"

using namespace parallm;

TEST(Env, RegistryListsEachVariableOnceInOrderWithItsMeaning) {
  std::set<std::string> names;
  int i = 0;
  for (const env::Info& v : env::registry()) {
    EXPECT_EQ(static_cast<int>(v.var), i++) << v.name;
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " twice";
    EXPECT_TRUE(std::string(v.name).rfind("PARALLM_", 0) == 0 || std::string(v.name) == "LOG_FROM_ALL_RANKS") << v.name;
    EXPECT_GT(std::string(v.meaning).size(), 20u) << v.name;
    EXPECT_EQ(&env::info(v.var), &env::info(v.var));
    EXPECT_STREQ(env::name(v.var), v.name);
  }
  EXPECT_TRUE(names.count("PARALLM_PROFILE") && names.count("PARALLM_COMM_POLL_US") && names.count("PARALLM_ISA"));
  const std::string table = env::help_table();
  for (const std::string& n : names) EXPECT_NE(table.find(n), std::string::npos) << n << " missing from the table";
}

TEST(Env, UnsetAndEmptyMeanTheDefault) {
  ::unsetenv("PARALLM_JOB_ID");
  EXPECT_EQ(env::get(env::Var::JobId), nullptr);
  EXPECT_EQ(env::value(env::Var::JobId), "");
  ::setenv("PARALLM_JOB_ID", "", 1);
  EXPECT_EQ(env::get(env::Var::JobId), nullptr);
  ::setenv("PARALLM_JOB_ID", "run-7", 1);
  EXPECT_STREQ(env::get(env::Var::JobId), "run-7");
  EXPECT_EQ(env::value(env::Var::JobId), "run-7");
  ::unsetenv("PARALLM_JOB_ID");

  ::unsetenv("PARALLM_TRACE_DIR");
  EXPECT_EQ(env::value(env::Var::TraceDir), ".");
  ::setenv("PARALLM_TRACE_DIR", "", 1);
  EXPECT_EQ(env::value(env::Var::TraceDir), ".");
  ::unsetenv("PARALLM_TRACE_DIR");
}

TEST(Env, IntegersAreCheckedAndTheVariableNamed) {
  ::unsetenv("PARALLM_COMM_POLL_US");
  EXPECT_EQ(env::integer(env::Var::CommPollUs, 0, 1000000), 50);
  ::setenv("PARALLM_COMM_POLL_US", "7", 1);
  EXPECT_EQ(env::integer(env::Var::CommPollUs, 0, 1000000), 7);
  for (const char* bad : {"x", "5us", "-1", "2000000", "99999999999999999999", " 5"}) {
    ::setenv("PARALLM_COMM_POLL_US", bad, 1);
    try {
      env::integer(env::Var::CommPollUs, 0, 1000000);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("PARALLM_COMM_POLL_US=\"" + std::string(bad) +
                                           "\": expected an integer in "
                                           "[0, 1000000]"),
                std::string::npos)
          << e.what();
    }
  }
  ::unsetenv("PARALLM_COMM_POLL_US");
}

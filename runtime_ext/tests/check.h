// A minimal test harness for the C++ unit tests (plain asserts under CTest, nothing fetched at
// build time): TEST(name) registers a case, CHECK records a failure and carries on, and main()
// (check_main.cpp) runs every case and exits non-zero if any check failed.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace ethost_test {

struct Case {
  const char* name;
  void (*run)();
};

inline std::vector<Case>& cases() {
  static std::vector<Case> all;
  return all;
}

inline int& failures() {
  static int count = 0;
  return count;
}

struct Registrar {
  Registrar(const char* name, void (*run)()) { cases().push_back({name, run}); }
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace ethost_test

#define TEST(name)                                                \
  static void name();                                             \
  static ::ethost_test::Registrar name##_registrar(#name, &name); \
  static void name()

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++::ethost_test::failures();                                                  \
    }                                                                               \
  } while (0)

// CHECK that `text` (a std::string) contains `part`, printing the text when it does not. The text
// is copied: `text` may name a member of a temporary (`read(m).status().reason`), which a
// reference would outlive (lane_test aborted under ASan on exactly that).
#define CHECK_CONTAINS(text, part)                                                        \
  do {                                                                                    \
    const std::string ethost_text_ = (text);                                              \
    if (!::ethost_test::contains(ethost_text_, (part))) {                                 \
      std::fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, \
                   ethost_text_.c_str(), std::string(part).c_str());                      \
      ++::ethost_test::failures();                                                        \
    }                                                                                     \
  } while (0)

#include "check.h"

int main() {
  for (const auto& c : ethost_test::cases()) {
    int before = ethost_test::failures();
    c.run();
    std::printf("%s %s\n", ethost_test::failures() == before ? "ok  " : "FAIL", c.name);
  }
  std::printf("%zu cases, %d failed checks\n", ethost_test::cases().size(),
              ethost_test::failures());
  return ethost_test::failures() == 0 ? 0 : 1;
}

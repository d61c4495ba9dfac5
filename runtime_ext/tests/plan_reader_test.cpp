// Reading which method inputs only device delegates read, from real exported programs and from
// damaged copies of one: a CPU-only program reads its input on the CPU; a TensorRT-delegated
// add whose inputs feed only its delegate qualifies when (and only when) TensorRTBackend takes
// device memory; a truncated or scrambled file reads as "the CPU may read everything".
//
// Programs (ETHOST_TEST_PROGRAMS, exported by tests/unit/test_native_checks.py): unplanned.pte
// (linear + relu on the CPU) and trt_unplanned.pte (the TensorRT test add, inputs unplanned).
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "check.h"
#include "plan_reader.h"

using ethost::inputs_read_only_by_delegates;

namespace {

std::vector<uint8_t> bytes_of(const char* file) {
  const char* dir = std::getenv("ETHOST_TEST_PROGRAMS");
  if (dir == nullptr || dir[0] == '\0') {
    std::fprintf(stderr, "ETHOST_TEST_PROGRAMS is not set (tests/unit/test_native_checks.py)\n");
    ++ethost_test::failures();
    return {};
  }
  std::ifstream in(std::string(dir) + "/" + file, std::ios::binary);
  std::vector<uint8_t> out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (out.empty()) ++ethost_test::failures();
  return out;
}

bool tensorrt(const std::string& id) {
  return id == "TensorRTBackend";
}

bool none(const std::string&) {
  return false;
}

}  // namespace

TEST(a_cpu_program_reads_its_input_on_the_cpu) {
  auto data = bytes_of("unplanned.pte");
  CHECK(inputs_read_only_by_delegates(data.data(), data.size(), "forward", tensorrt) ==
        std::vector<bool>{false});
}

TEST(inputs_feeding_only_a_device_delegate_qualify) {
  auto data = bytes_of("trt_unplanned.pte");
  CHECK((inputs_read_only_by_delegates(data.data(), data.size(), "forward", tensorrt) ==
         std::vector<bool>{true, true}));
  // the same delegate, from a backend not declared to take device memory
  CHECK((inputs_read_only_by_delegates(data.data(), data.size(), "forward", none) ==
         std::vector<bool>{false, false}));
}

TEST(an_unknown_method_or_a_damaged_file_reads_as_nothing_qualifies) {
  auto data = bytes_of("trt_unplanned.pte");
  CHECK(inputs_read_only_by_delegates(data.data(), data.size(), "missing", tensorrt).empty());
  for (size_t cut : {size_t{0}, size_t{7}, data.size() / 3, data.size() / 2}) {
    auto read = inputs_read_only_by_delegates(data.data(), cut, "forward", tensorrt);
    for (bool qualifies : read) CHECK(!qualifies);
  }
  auto scrambled = data;
  for (size_t i = 8; i < scrambled.size(); i += 7) scrambled[i] ^= 0x5a;
  auto read =
      inputs_read_only_by_delegates(scrambled.data(), scrambled.size(), "forward", tensorrt);
  for (bool qualifies : read) CHECK(!qualifies);
}

// Numbers written as the Python path writes them (orjson): every answer is the same bytes
// whichever path made it. Floats take the shortest digits that read back as the same value
// (of float32 for FP32, FP16 and BF16 arrays, of double for FP64 and for single values), laid
// out as orjson lays them out: plain within a range of exponents ("0.000012345", "1234500.0"),
// scientific outside it ("1e-7", "1.2345e+16"). tests/unit/test_front_lane.py compares them
// with orjson over many values.
#pragma once

#include <cstdint>
#include <string>

namespace etrt_front {

void append_float32(std::string& out, float value);   // finite values only
void append_float64(std::string& out, double value);  // finite values only
void append_int(std::string& out, int64_t value);
void append_uint(std::string& out, uint64_t value);

}  // namespace etrt_front

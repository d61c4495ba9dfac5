#include "load_options.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ethost_trt {
namespace {

thread_local LoadOptions t_options;

}  // namespace

int64_t WeightBudget::resolve(int64_t streamable) const {
  if (streamable <= 0) return 0;
  if (bytes) return std::min(*bytes, streamable);
  double want = std::floor(fraction.value_or(1.0) * static_cast<double>(streamable));
  return std::clamp(static_cast<int64_t>(want), int64_t{0}, streamable);
}

std::string WeightBudget::key() const {
  if (bytes) return "bytes:" + std::to_string(*bytes);
  return "fraction:" + std::to_string(fraction.value_or(1.0));
}

LoadOptions LoadOptions::over(const LoadOptions& baked) const {
  LoadOptions out = baked;
  if (weight_streaming_budget) out.weight_streaming_budget = weight_streaming_budget;
  if (use_cuda_graphs) out.use_cuda_graphs = use_cuda_graphs;
  if (use_shared_engines) out.use_shared_engines = use_shared_engines;
  if (use_shared_activation_scratch) {
    out.use_shared_activation_scratch = use_shared_activation_scratch;
  }
  return out;
}

void set_thread_load_options(LoadOptions options) {
  t_options = std::move(options);
}

const LoadOptions& thread_load_options() {
  return t_options;
}

Status CompileSpecReader::add(const std::string& key, const uint8_t* value, size_t size) {
  std::string text(reinterpret_cast<const char*>(value), size);
  if (key == "weight_streaming_budget") {
    if (options_.weight_streaming_budget) {
      return Status(Error::InvalidProgram, "compile spec weight_streaming_budget given twice");
    }
    bool digits =
        !text.empty() && text.size() <= 18 &&
        std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) {
      return Status(Error::InvalidProgram,
                    "compile spec weight_streaming_budget is not a decimal byte count: '" +
                        text.substr(0, 40) + "'");
    }
    options_.weight_streaming_budget = WeightBudget{std::stoll(text), std::nullopt};
  } else if (key == "use_cuda_graphs") {
    if (options_.use_cuda_graphs) {
      return Status(Error::InvalidProgram, "compile spec use_cuda_graphs given twice");
    }
    if (text != "0" && text != "1") {
      return Status(Error::InvalidProgram, "compile spec use_cuda_graphs is not b\"0\" or b\"1\"");
    }
    options_.use_cuda_graphs = text == "1";
  }
  return Status();
}

}  // namespace ethost_trt

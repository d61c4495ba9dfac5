#include "method_spec.h"

#include "executorch_log.h"

using executorch::runtime::EValue;
using executorch::runtime::Method;
using executorch::runtime::MethodMeta;
using executorch::runtime::Result;
using executorch::runtime::Tag;
using executorch::runtime::TensorInfo;
using executorch::runtime::TensorShapeDynamism;
namespace etensor = executorch::runtime::etensor;

namespace ethost {
namespace {

Outcome<TensorSpec> describe_value(const char* role, size_t index, Result<Tag> tag,
                                   Result<TensorInfo> (MethodMeta::*info_of)(size_t) const,
                                   const MethodMeta& meta, const EValue* loaded,
                                   const std::string& path) {
  TensorSpec spec;
  spec.index = index;
  spec.name = std::string(role) + " " + std::to_string(index);
  if (!tag.ok()) {
    return from_executorch(tag.error(), "reading method '" + std::string(meta.name()) + "' of",
                           path);
  }
  spec.tag = tag.get();
  if (spec.tag != Tag::Tensor) {
    return spec;
  }
  auto info = (meta.*info_of)(index);
  if (!info.ok()) {
    return from_executorch(info.error(), "reading method '" + std::string(meta.name()) + "' of",
                           path);
  }
  spec.is_tensor = true;
  spec.dtype = info->scalar_type();
  spec.shape.assign(info->sizes().begin(), info->sizes().end());
  spec.memory_planned = info->is_memory_planned();
  spec.nbytes = info->nbytes();
  if (!info->name().empty()) {
    spec.name += " ('" + std::string(info->name()) + "')";
  }
  if (loaded != nullptr && loaded->isTensor()) {
    spec.dynamic = loaded->toTensor().shape_dynamism() != TensorShapeDynamism::STATIC;
  }
  return spec;
}

}  // namespace

const char* tag_name(Tag tag) {
  switch (tag) {
    case Tag::None: return "None";
    case Tag::Tensor: return "Tensor";
    case Tag::String: return "String";
    case Tag::Double: return "Double";
    case Tag::Int: return "Int";
    case Tag::Bool: return "Bool";
    case Tag::ListBool: return "ListBool";
    case Tag::ListDouble: return "ListDouble";
    case Tag::ListInt: return "ListInt";
    case Tag::ListTensor: return "ListTensor";
    case Tag::ListScalar: return "ListScalar";
    case Tag::ListOptionalTensor: return "ListOptionalTensor";
  }
  return "Unknown";
}

Outcome<MethodSpec> describe_method(const MethodMeta& meta, const Method& method,
                                    const std::string& path) {
  MethodSpec spec;
  spec.name = meta.name();
  std::vector<EValue> inputs(method.inputs_size());
  // get_inputs copies the EValues (tensor handles, not data); only the dynamism is read. It is
  // deprecated in favour of MethodMeta, which does not carry dynamism.
  auto& mutable_method = const_cast<Method&>(method);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  bool have_inputs =
      mutable_method.get_inputs(inputs.data(), inputs.size()) == executorch::runtime::Error::Ok;
#pragma GCC diagnostic pop
  for (size_t i = 0; i < meta.num_inputs(); ++i) {
    const EValue* loaded = have_inputs && i < inputs.size() ? &inputs[i] : nullptr;
    ETHOST_ASSIGN_OR_RETURN(TensorSpec input,
                            describe_value("input", i, meta.input_tag(i),
                                           &MethodMeta::input_tensor_meta, meta, loaded, path));
    spec.inputs.push_back(std::move(input));
  }
  for (size_t i = 0; i < meta.num_outputs(); ++i) {
    const EValue* loaded = i < method.outputs_size() ? &method.get_output(i) : nullptr;
    ETHOST_ASSIGN_OR_RETURN(TensorSpec output,
                            describe_value("output", i, meta.output_tag(i),
                                           &MethodMeta::output_tensor_meta, meta, loaded, path));
    spec.outputs.push_back(std::move(output));
  }
  for (size_t i = 0; i < meta.num_backends(); ++i) {
    auto backend = meta.get_backend_name(i);
    if (backend.ok()) {
      spec.delegates.emplace_back(backend.get());
    }
  }
  for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i) {
    PlannedBufferSpec buffer;
    auto size = meta.memory_planned_buffer_size(i);
    auto device = meta.memory_planned_buffer_device(i);
    buffer.size = size.ok() ? size.get() : -1;
    buffer.device = !device.ok()                                 ? "unknown"
                    : device->type() == etensor::DeviceType::CPU ? "cpu"
                                                                 : "cuda";
    spec.planned_buffers.push_back(buffer);
  }
  return spec;
}

}  // namespace ethost

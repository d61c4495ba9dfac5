#include "delegate_init.h"

namespace ethost_trt {

Outcome<std::unique_ptr<EngineRunner>> make_runner(const uint8_t* blob_data, size_t blob_size,
                                                   const NamedLookup& named_lookup,
                                                   const std::string& label,
                                                   const std::function<void()>& release_bytes,
                                                   const LoadOptions& baked) {
  LoadOptions options = thread_load_options().over(baked);
  ETHOST_ASSIGN_OR_RETURN(ParsedBlob blob, parse_blob(blob_data, blob_size));
  ETHOST_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> memory, active_memory());
  Bytes plan{blob.engine, static_cast<size_t>(blob.engine_size)};
  if (blob.metadata.engine_key) {
    const std::string& key = *blob.metadata.engine_key;
    auto found = named_lookup(key);
    if (!found.ok()) {
      return Status(Error::InvalidExternalData,
                    found.status().code == Error::NotFound
                        ? "the engine is stored under '" + key +
                              "' but the program was loaded without its .ptd data file"
                        : "the program's data has no entry '" + key +
                              "' (load the .ptd this program was exported with)");
    }
    plan = found.value();
  }
  Outcome<std::shared_ptr<Engine>> engine = Status();
  {
    auto lifecycle = engine_lifecycle_shared();  // no CUDA-graph capture meanwhile
    engine = deserialize_engine(
        plan.data, plan.size, memory->device_id(),
        DeserializeOptions{options.shared_engines(), options.weight_streaming_budget});
  }
  release_bytes();
  if (!engine.ok()) return engine.take_status();
  return EngineRunner::create(engine.take(), blob.metadata, std::move(memory), label, options);
}

}  // namespace ethost_trt

// CUDA runtime behind DeviceMemory. libcudart is opened at run time, not linked, so the module
// imports (and the service starts and explains itself) on a host without CUDA.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "device_memory.h"

namespace ethost_device {
namespace {

// The few CUDA runtime entry points used, declared here with their C ABI types
// (cudaError_t is an int enum, cudaStream_t a pointer).
struct CudaPointerAttributes {
  int type;  // 0 unregistered, 1 host, 2 device, 3 managed
  int device;
  void* device_pointer;
  void* host_pointer;
  long reserved[8];
};

constexpr int kAttrPageableMemoryAccess = 88;
constexpr unsigned kStreamNonBlocking = 1;

struct CudaApi {
  int (*get_device_count)(int*);
  int (*get_device)(int*);
  int (*set_device)(int);
  int (*device_get_attribute)(int*, int, int);
  int (*malloc)(void**, size_t);
  int (*free)(void*);
  int (*memcpy_async)(void*, const void*, size_t, int, void*);
  int (*stream_create_with_flags)(void**, unsigned);
  int (*stream_synchronize)(void*);
  int (*stream_destroy)(void*);
  int (*pointer_get_attributes)(CudaPointerAttributes*, const void*);
  int (*get_last_error)();
  int (*device_synchronize)();
  const char* (*get_error_name)(int);
  const char* (*get_error_string)(int);
  int (*host_register)(void*, size_t, unsigned);
  int (*host_unregister)(void*);
};

template <typename F>
bool bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

// Opens libcudart once per process; the handle stays open for the life of the process.
Outcome<const CudaApi*> load_cudart() {
  static CudaApi api;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("ETHOST_CUDART");
    const char* candidates[] = {env, "libcudart.so.13", "libcudart.so",
                                "/usr/local/cuda/lib64/libcudart.so.13"};
    void* lib = nullptr;
    std::string tried;
    for (const char* name : candidates) {
      if (name == nullptr) continue;
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib != nullptr) break;
      tried += std::string(" ") + name;
    }
    if (lib == nullptr) {
      failure = "no CUDA runtime: could not open" + tried;
      return;
    }
    bool ok = bind(lib, "cudaGetDeviceCount", &api.get_device_count) &&
              bind(lib, "cudaGetDevice", &api.get_device) &&
              bind(lib, "cudaSetDevice", &api.set_device) &&
              bind(lib, "cudaDeviceGetAttribute", &api.device_get_attribute) &&
              bind(lib, "cudaMalloc", &api.malloc) && bind(lib, "cudaFree", &api.free) &&
              bind(lib, "cudaMemcpyAsync", &api.memcpy_async) &&
              bind(lib, "cudaStreamCreateWithFlags", &api.stream_create_with_flags) &&
              bind(lib, "cudaStreamSynchronize", &api.stream_synchronize) &&
              bind(lib, "cudaStreamDestroy", &api.stream_destroy) &&
              bind(lib, "cudaPointerGetAttributes", &api.pointer_get_attributes) &&
              bind(lib, "cudaGetLastError", &api.get_last_error) &&
              bind(lib, "cudaDeviceSynchronize", &api.device_synchronize) &&
              bind(lib, "cudaGetErrorName", &api.get_error_name) &&
              bind(lib, "cudaGetErrorString", &api.get_error_string) &&
              bind(lib, "cudaHostRegister", &api.host_register) &&
              bind(lib, "cudaHostUnregister", &api.host_unregister);
    if (!ok) failure = "the CUDA runtime found lacks an entry point this module needs";
  });
  if (!failure.empty()) return Status(Error::NotSupported, failure);
  return &api;
}

class CudaMemory final : public DeviceMemory {
 public:
  CudaMemory(const CudaApi* api, int device, bool pageable)
      : api_(api), device_(device), pageable_(pageable) {}

  const char* kind() const override { return "cuda"; }
  int device_id() const override { return device_; }
  bool reads_pageable_host_memory() const override { return pageable_; }

  bool is_device_pointer(const void* p) const override {
    if (p == nullptr) return false;
    CudaPointerAttributes attrs{};
    if (api_->pointer_get_attributes(&attrs, p) != 0) {
      api_->get_last_error();  // a failed query must not linger as the thread's error
      return false;
    }
    return attrs.type == 2 || attrs.type == 3;
  }

  Outcome<void*> allocate(size_t nbytes) override {
    void* p = nullptr;
    ETHOST_RETURN_IF_ERROR(
        check(api_->set_device(device_), "cudaSetDevice", Error::MemoryAllocationFailed));
    ETHOST_RETURN_IF_ERROR(check(api_->malloc(&p, nbytes == 0 ? 256 : nbytes), "cudaMalloc",
                                 Error::MemoryAllocationFailed));
    return p;
  }

  void release(void* p) override {
    if (p != nullptr) check(api_->free(p), "cudaFree", Error::Internal);
  }

  Status copy_async(void* dst, const void* src, size_t nbytes, CopyKind kind,
                    StreamHandle stream) override {
    if (nbytes == 0) return Status();
    return check(api_->memcpy_async(dst, src, nbytes, static_cast<int>(kind),
                                    reinterpret_cast<void*>(stream)),
                 "cudaMemcpyAsync", Error::Internal);
  }

  Outcome<StreamHandle> create_stream() override {
    void* s = nullptr;
    ETHOST_RETURN_IF_ERROR(check(api_->set_device(device_), "cudaSetDevice", Error::Internal));
    ETHOST_RETURN_IF_ERROR(check(api_->stream_create_with_flags(&s, kStreamNonBlocking),
                                 "cudaStreamCreateWithFlags", Error::Internal));
    return reinterpret_cast<StreamHandle>(s);
  }

  Status synchronize(StreamHandle stream) override {
    return check(api_->stream_synchronize(reinterpret_cast<void*>(stream)), "cudaStreamSynchronize",
                 Error::Internal);
  }

  void destroy_stream(StreamHandle stream) override {
    check(api_->stream_destroy(reinterpret_cast<void*>(stream)), "cudaStreamDestroy",
          Error::Internal);
  }

  Status pin_host(void* p, size_t nbytes) override {
    if (pageable_) {
      return Status(Error::NotSupported, "this GPU reads pageable host memory directly");
    }
    ETHOST_RETURN_IF_ERROR(check(api_->set_device(device_), "cudaSetDevice", Error::Internal));
    return check(api_->host_register(p, nbytes, 0), "cudaHostRegister", Error::Internal);
  }

  Status unpin_host(void* p) override {
    return check(api_->host_unregister(p), "cudaHostUnregister", Error::Internal);
  }

  Status context_health() override {
    // A sticky error is returned by every later call; a non-sticky one was the failed call's
    // alone (check() cleared it). Synchronizing waits for the work in flight, which is what
    // tells a kernel's fault that has not been reported yet.
    int rc = api_->set_device(device_);
    if (rc == 0) rc = api_->device_synchronize();
    if (rc == 0) return Status();
    return Status(Error::Internal,
                  std::string(api_->get_error_name(rc)) + ": " + api_->get_error_string(rc));
  }

 private:
  Status check(int rc, const char* what, Error code) const {
    if (rc == 0) return Status();
    Status failed(code, std::string(what) + " failed: " + api_->get_error_string(rc));
    // A non-sticky failure (e.g. an allocation) must not linger for TensorRT's next check.
    api_->get_last_error();
    return failed;
  }

  const CudaApi* api_;
  const int device_;
  const bool pageable_;
};

}  // namespace

Outcome<std::shared_ptr<DeviceMemory>> make_cuda_memory() {
  ETHOST_ASSIGN_OR_RETURN(const CudaApi* api, load_cudart());
  int count = 0;
  int rc = api->get_device_count(&count);
  if (rc != 0 || count == 0) {
    Status failed(Error::NotSupported,
                  std::string("no CUDA device: ") +
                      (rc != 0 ? api->get_error_string(rc) : "cudaGetDeviceCount found none"));
    api->get_last_error();
    return failed;
  }
  int device = 0;
  int pageable = 0;
  if (api->get_device(&device) != 0 ||
      api->device_get_attribute(&pageable, kAttrPageableMemoryAccess, device) != 0) {
    api->get_last_error();
    return Status(Error::NotSupported, "could not query the current CUDA device");
  }
  return std::shared_ptr<DeviceMemory>(std::make_shared<CudaMemory>(api, device, pageable != 0));
}

}  // namespace ethost_device

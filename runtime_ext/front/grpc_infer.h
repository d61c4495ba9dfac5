// The Open Inference Protocol's gRPC ModelInfer for the fronts' native path: a request message's
// protobuf bytes read into what they give (GivenRequest, front_requests.h), and the answer's
// ModelInferResponse bytes, the same bytes the Python path writes (service/front/protocols/
// v2_grpc/servicer.py, _infer_response; tests/unit/test_front_grpc_differential.py holds them
// together).
//
// grpcio has already taken the call (its token and drain interceptors ran) and hands its message
// here whole, so there is no head to read. Inputs and outputs may lie in clients' shared memory
// regions (Triton's shared_memory_region, _byte_size and _offset tensor parameters: string and
// integer choices, as service/shm/refs.py reads them). An input's binary_data_size (an integer,
// as KServe's gRPC client sends it) is ignored, as the Python path ignores it. Only what the
// Python path would accept and send to the engine as a lane request is taken: request
// parameters (a timeout, a priority, a method), any other tensor parameter (classification),
// typed contents, an unknown field, a
// repeated singular one or map key, text other than printable ASCII, or a byte count that does
// not add up is declined, and the Python path parses the message from its first byte as before.
#pragma once

#include "front_answers.h"
#include "front_requests.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace etrt_front {

// A ModelInferRequest message. Its raw_input_contents must be one entry per input that is not in
// a region, in order, each exactly its tensor's bytes; `request.inputs[i].bytes` then points into
// `message` (null for one in a region, whose byte size must be its tensor's).
bool read_grpc_infer(const uint8_t* message, size_t size, GivenRequest& request);

// The ModelInferResponse: `out.head` the message without its raw_output_contents, then in
// `out.binary` each output's field head (in `out.framing`) and its bytes where they lie. An
// output written into a region has its parameters and an empty entry (none after the last output
// with bytes, when any tensor of the request lies in a region: as the servicer writes it).
void write_grpc_answer(const AnswerPlan& plan, const std::vector<TensorSpec>& specs,
                       const std::vector<Output>& outputs, AnswerBytes& out);

}  // namespace etrt_front

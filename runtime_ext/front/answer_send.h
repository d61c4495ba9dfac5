// An answer of the fronts' native path (front_answers.h) written to its connection's socket from
// where its bytes lie: the HTTP head and JSON, then each binary output straight from the
// request's arena slot, in one gathered write. Before this, a 602 KB output was copied into the
// answer's string and again into a Python bytes object (each a fresh allocation whose pages
// faulted in) before the transport wrote it: ~0.4 ms of a front's CPU per image answer.
//
// The caller (service/front/protocols/http_transport.py) passes the socket only when nothing of
// the connection waits to be written before this answer; what the socket does not take now (it
// is non-blocking) comes back as bytes for the connection's transport to write after it, so the
// slot can be freed at once and the connection's order holds. A failed write is not an error
// here: the rest goes to the transport, which meets the same failure and ends the connection as
// it does for any answer.
#pragma once

#include "front_answers.h"

#include <string>

namespace etrt_front {

// Writes `answer` to socket `fd` as far as it takes it now (none when fd < 0); `rest` is set to
// the bytes not written, in order. Returns the bytes written.
size_t send_answer(int fd, const AnswerBytes& answer, std::string& rest);

}  // namespace etrt_front

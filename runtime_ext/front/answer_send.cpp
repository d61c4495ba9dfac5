#include "answer_send.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <climits>
#include <vector>

namespace etrt_front {

size_t send_answer(int fd, const AnswerBytes& answer, std::string& rest) {
  std::vector<std::string_view> pieces;
  pieces.reserve(1 + answer.binary.size());
  pieces.push_back(answer.head);
  for (std::string_view piece : answer.binary) {
    if (!piece.empty()) pieces.push_back(piece);
  }
  size_t first = 0;  // the first piece not written whole
  size_t sent = 0;
  while (fd >= 0 && first < pieces.size()) {
    std::vector<iovec> iov;
    for (size_t i = first; i < pieces.size() && iov.size() < IOV_MAX; ++i) {
      iov.push_back({const_cast<char*>(pieces[i].data()), pieces[i].size()});
    }
    msghdr message{};
    message.msg_iov = iov.data();
    message.msg_iovlen = iov.size();
    ssize_t written = sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) break;  // full for now, or failed: the transport writes the rest
    sent += static_cast<size_t>(written);
    size_t left = static_cast<size_t>(written);
    while (first < pieces.size() && left >= pieces[first].size()) {
      left -= pieces[first].size();
      ++first;
    }
    if (left > 0) pieces[first].remove_prefix(left);
  }
  size_t remaining = 0;
  for (size_t i = first; i < pieces.size(); ++i) remaining += pieces[i].size();
  rest.clear();
  rest.reserve(remaining);
  for (size_t i = first; i < pieces.size(); ++i) rest.append(pieces[i]);
  return sent;
}

}  // namespace etrt_front

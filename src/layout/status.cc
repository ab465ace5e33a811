#include "reshard/status.h"

namespace reshard {

std::string Status::ToString() const {
  switch (code_) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "invalid argument: " + message_;
    case Code::kNotSupported: return "not supported: " + message_;
    case Code::kInternal: return "internal error: " + message_;
    case Code::kUnavailable: return "unavailable: " + message_;
  }
  return message_;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

}  // namespace reshard

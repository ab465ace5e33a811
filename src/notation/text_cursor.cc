#include "notation/text_cursor.h"

#include <cctype>

#include "layout/checked_math.h"

namespace reshard {
namespace {
bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
}  // namespace

void TextCursor::SkipSpace() {
  while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
}

bool TextCursor::TryConsume(std::string_view token) {
  SkipSpace();
  if (text_.substr(pos_, token.size()) != token) return false;
  pos_ += token.size();
  return true;
}

bool TextCursor::TryConsumeWord(std::string_view word) {
  SkipSpace();
  if (text_.substr(pos_, word.size()) != word) return false;
  if (pos_ + word.size() < text_.size() && IsIdentChar(text_[pos_ + word.size()])) return false;
  pos_ += word.size();
  return true;
}

std::string TextCursor::Found() const {
  size_t p = pos_;
  while (p < text_.size() && std::isspace(static_cast<unsigned char>(text_[p]))) ++p;
  if (p >= text_.size()) return "end of text";
  return "'" + std::string(1, text_[p]) + "'";
}

Status TextCursor::Expect(std::string_view token) {
  if (TryConsume(token)) return Status::Ok();
  return Error("expected '" + std::string(token) + "' (found " + Found() + ")");
}

Status TextCursor::ExpectEnd() {
  if (AtEnd()) return Status::Ok();
  return Error("unexpected text after the end (found " + Found() + ")");
}

Result<int64_t> TextCursor::ParseInt() {
  SkipSpace();
  const size_t start = pos_;
  if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_])))
    return Error("expected a non-negative integer (found " + Found() + ")");
  int64_t v = 0;
  while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
    if (!CheckedMul(v, 10, &v) || !CheckedAdd(v, text_[pos_] - '0', &v))
      return ErrorAt(start, "integer '" + std::string(text_.substr(start, pos_ - start + 1)) + "...' overflows int64");
    ++pos_;
  }
  return v;
}

Result<std::vector<int64_t>> TextCursor::ParseIntList(char open, char close) {
  RESHARD_RETURN_IF_ERROR(Expect(std::string(1, open)));
  std::vector<int64_t> v;
  if (TryConsume(std::string(1, close))) return v;
  do {
    RESHARD_ASSIGN_OR_RETURN(int64_t x, ParseInt());
    v.push_back(x);
  } while (TryConsume(","));
  RESHARD_RETURN_IF_ERROR(Expect(std::string(1, close)));
  return v;
}

Result<std::string> TextCursor::ParseIdentifier() {
  SkipSpace();
  const size_t start = pos_;
  if (pos_ >= text_.size() || !(std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
    return Error("expected a name (found " + Found() + ")");
  while (pos_ < text_.size() && IsIdentChar(text_[pos_])) ++pos_;
  return std::string(text_.substr(start, pos_ - start));
}

Result<std::string> TextCursor::ParseQuoted(char* quote) {
  SkipSpace();
  if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
    return Error("expected a quoted name (found " + Found() + ")");
  const char q = text_[pos_];
  const size_t start = pos_++;
  while (pos_ < text_.size() && text_[pos_] != q) ++pos_;
  if (pos_ >= text_.size()) return ErrorAt(start, std::string("unterminated string: missing closing ") + q);
  std::string s(text_.substr(start + 1, pos_ - start - 1));
  ++pos_;
  if (quote) *quote = q;
  return s;
}

Status TextCursor::SkipBalanced() {
  SkipSpace();
  const size_t start = pos_;
  std::string stack;
  do {
    if (pos_ >= text_.size()) return ErrorAt(start, "unbalanced brackets: this group is never closed");
    const char c = text_[pos_];
    if (c == '"') {
      auto s = ParseQuoted();
      if (!s.ok()) return s.status();
      continue;
    }
    if (c == '{' || c == '[' || c == '(') stack.push_back(c == '{' ? '}' : c == '[' ? ']' : ')');
    else if (c == '}' || c == ']' || c == ')') {
      if (stack.empty() || stack.back() != c) return Error(std::string("unbalanced brackets: unexpected '") + c + "'");
      stack.pop_back();
    }
    ++pos_;
  } while (!stack.empty());
  return Status::Ok();
}

Status TextCursor::ErrorAt(size_t pos, const std::string& what) const {
  std::string msg = "col " + std::to_string(pos + 1) + ": " + what + "\n  " + std::string(text_) + "\n  " +
                    std::string(pos, ' ') + "^";
  return Status::InvalidArgument(msg);
}

}  // namespace reshard

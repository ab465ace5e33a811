#include "notation/text_cursor.h"

#include <algorithm>
#include <cctype>

#include "layout/checked_math.h"

namespace reshard {
namespace {
bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Length of the valid UTF-8 character starting at text[i], or 0 when the byte
// there does not start one (RFC 3629: no overlong forms, surrogates or code
// points past U+10FFFF).
size_t Utf8Length(std::string_view text, size_t i) {
  auto at = [&](size_t k) { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u; };
  auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) { return at(k) >= lo && at(k) <= hi; };
  const unsigned c = at(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

// Byte length of the character at text[i]: an invalid byte is one character.
size_t CharBytes(std::string_view text, size_t i) { return std::max<size_t>(1, Utf8Length(text, i)); }

std::string HexByte(unsigned char b) {
  static const char kHex[] = "0123456789abcdef";
  return std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
}

// Characters [from, to) of text (as byte offsets of character starts), shown:
// invalid bytes as U+FFFD, so that each character takes one column.
std::string Shown(std::string_view text, size_t from, size_t to) {
  std::string out;
  for (size_t i = from; i < to;) {
    const size_t n = Utf8Length(text, i);
    if (n == 0) { out += "\xEF\xBF\xBD"; ++i; continue; }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}
}  // namespace

size_t CharColumn(std::string_view text, size_t pos) {
  size_t col = 1;
  for (size_t i = 0; i < pos && i < text.size(); i += CharBytes(text, i)) ++col;
  return col;
}

std::string EscapeInvalidUtf8(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8Length(text, i);
    if (n == 0) { out += HexByte(static_cast<unsigned char>(text[i])); ++i; continue; }
    out.append(text.substr(i, n));
    i += n;
  }
  return out;
}

std::string ShortText(std::string_view text, size_t max_chars) {
  size_t end = 0, chars = 0;
  while (end < text.size() && chars < max_chars) { end += CharBytes(text, end); ++chars; }
  return EscapeInvalidUtf8(text.substr(0, end)) + (end < text.size() ? "..." : "");
}

std::string EchoText(std::string_view text, size_t pos, bool caret) {
  // Character starts, so that the window is cut between characters.
  std::vector<size_t> starts;
  for (size_t i = 0; i < text.size(); i += CharBytes(text, i)) starts.push_back(i);
  const size_t chars = starts.size();
  starts.push_back(text.size());
  const size_t col = std::min(CharColumn(text, pos) - 1, chars);  // 0-based, may be the end
  size_t first = 0, last = chars;  // the characters shown
  if (chars > kMaxEcho) {
    // Up to 40 characters before the column and the rest of kMaxEcho after it.
    first = caret ? (col > 40 ? col - 40 : 0) : 0;
    last = std::min(chars, first + kMaxEcho);
    if (last - first < kMaxEcho) first = last - kMaxEcho;
  }
  const std::string before = first > 0 ? "..." : "";
  std::string out = "\n  " + before + Shown(text, starts[first], starts[last]) + (last < chars ? "..." : "");
  if (caret) out += "\n  " + std::string(before.size() + col - first, ' ') + "^";
  return out;
}

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
  const size_t n = Utf8Length(text_, p);
  if (n == 0) return "'" + HexByte(static_cast<unsigned char>(text_[p])) + "'";
  return "'" + std::string(text_.substr(p, n)) + "'";
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
  return Status::InvalidArgument("col " + std::to_string(CharColumn(text_, pos)) + ": " + EscapeInvalidUtf8(what) +
                                 EchoText(text_, pos, /*caret=*/true));
}

}  // namespace reshard

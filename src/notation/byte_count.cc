#include "reshard/byte_count.h"

#include <cstdio>
#include <string>

#include "notation/text_cursor.h"

namespace reshard {
namespace {

std::string Quoted(std::string_view text) { return "'" + ShortText(text, kMaxEcho) + "'"; }

// "'c' at column N of 'text'", or "end of text at column N of 'text'".
std::string CharacterAt(std::string_view text, size_t pos) {
  std::string c = "end of text";
  const unsigned char b = pos < text.size() ? static_cast<unsigned char>(text[pos]) : 0;
  if (pos < text.size() && b < 0x80) {
    // ASCII as it is, a space or a control character included (the cursor would skip spaces).
    char hex[8];
    std::snprintf(hex, sizeof(hex), "\\x%02x", b);
    c = "'" + (b < 0x20 || b == 0x7f ? std::string(hex) : std::string(1, static_cast<char>(b))) + "'";
  } else if (pos < text.size()) {
    c = TextCursor(text.substr(pos)).Found();  // a character past ASCII, or an invalid byte as \xNN
  }
  return c + " at column " + std::to_string(CharColumn(text, pos)) + " of " + Quoted(text);
}

}  // namespace

Result<int64_t> ParseByteCount(std::string_view text) {
  const std::string expected = std::string("expected ") + kByteCountExpected;
  if (text.empty()) return Status::InvalidArgument("empty value; " + expected);
  size_t i = 0;
  int64_t whole = 0;
  bool huge = false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i)
    huge = huge || __builtin_mul_overflow(whole, 10, &whole) || __builtin_add_overflow(whole, text[i] - '0', &whole);
  if (i == 0) return Status::InvalidArgument("unexpected " + CharacterAt(text, 0) + "; " + expected);
  std::string fraction;  // the digits after the point
  if (i < text.size() && text[i] == '.') {
    const size_t point = i++;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) fraction += text[i];
    if (i == point + 1) return Status::InvalidArgument("unexpected " + CharacterAt(text, i) + "; " + expected);
  }
  const std::string_view unit = text.substr(i);
  int shift = 0;
  if (unit.empty())
    shift = 0;
  else if (unit == "K" || unit == "KiB")
    shift = 10;
  else if (unit == "M" || unit == "MiB")
    shift = 20;
  else if (unit == "G" || unit == "GiB")
    shift = 30;
  else if (unit == "T" || unit == "TiB")
    shift = 40;
  else
    return Status::InvalidArgument("unknown unit " + Quoted(unit) + " at column " + std::to_string(CharColumn(text, i)) +
                                   " of " + Quoted(text) + " (expected K, M, G or T)");
  if (unit.empty() && fraction.find_first_not_of('0') != std::string::npos)
    return Status::InvalidArgument(Quoted(text) + " is not a whole number of bytes");
  const std::string too_many = Quoted(text) + " is more than 2^62 bytes (4 EiB)";
  if (huge || whole > (kMaxByteCount >> shift)) return Status::InvalidArgument(too_many);
  // The fraction's whole bytes, floor(0.d1d2... * 2^shift), from the last digit back (each step exact).
  int64_t part = 0;
  for (size_t k = fraction.size(); k-- > 0;) part = (part + (fraction[k] - '0') * (int64_t{1} << shift)) / 10;
  const int64_t bytes = (whole << shift) + part;
  if (bytes < 1) return Status::InvalidArgument(Quoted(text) + " is less than 1 byte");
  if (bytes > kMaxByteCount) return Status::InvalidArgument(too_many);
  return bytes;
}

}  // namespace reshard

// TextCursor: the scanner all notation parsers share. It tracks a position in
// one line of text and turns failures into Status messages that quote the
// text, name the column and point at it with a caret.
//
// Columns count characters (UTF-8 code points, an invalid byte counting as
// one), from 1. Every message is valid UTF-8 whatever the text: a byte that is
// not part of a valid UTF-8 character is echoed as U+FFFD and quoted as
// '\xNN'. A text longer than kMaxEcho characters is echoed as a window of it
// around the column, with "..." where it was cut.
#ifndef RESHARD_SRC_NOTATION_TEXT_CURSOR_H_
#define RESHARD_SRC_NOTATION_TEXT_CURSOR_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/status.h"

namespace reshard {

// The 1-based character column of byte offset `pos` in `text`.
size_t CharColumn(std::string_view text, size_t pos);
// "\n  TEXT\n  ^" (the text as echoed, and a caret under `pos`'s column), or
// just "\n  TEXT" without a caret; long texts are cut to a window around `pos`.
inline constexpr size_t kMaxEcho = 100;
std::string EchoText(std::string_view text, size_t pos, bool caret);
// `text` with every byte that is not part of a valid UTF-8 character as \xNN.
std::string EscapeInvalidUtf8(std::string_view text);
// The first `max_chars` characters of `text` (escaped as above), and "..." if cut.
std::string ShortText(std::string_view text, size_t max_chars);

class TextCursor {
 public:
  explicit TextCursor(std::string_view text) : text_(text) {}

  size_t pos() const { return pos_; }
  // Skips spaces and returns the position of the next token (for errors).
  size_t Mark() { SkipSpace(); return pos_; }
  void set_pos(size_t p) { pos_ = p; }
  bool AtEnd() { SkipSpace(); return pos_ >= text_.size(); }
  char Peek() { SkipSpace(); return pos_ < text_.size() ? text_[pos_] : '\0'; }
  // True (and consumed) if the next non-space text is `token`.
  bool TryConsume(std::string_view token);
  // Like TryConsume for a word: the token must not be followed by an identifier character.
  bool TryConsumeWord(std::string_view word);
  Status Expect(std::string_view token);
  Status ExpectEnd();
  Result<int64_t> ParseInt();  // non-negative decimal, overflow-checked
  // "[1,2,3]" with the given brackets; may be empty.
  Result<std::vector<int64_t>> ParseIntList(char open, char close);
  Result<std::string> ParseIdentifier();  // [A-Za-z_][A-Za-z0-9_]*
  // A quoted string with ' or "; `quote` receives the quote character used.
  Result<std::string> ParseQuoted(char* quote = nullptr);
  // Skips a balanced {...}, [...], (...) or "..." group starting at the cursor.
  Status SkipBalanced();

  // "col 15: expected ']' (found '}')" followed by the text and a caret line.
  Status Error(const std::string& what) const { return ErrorAt(pos_, what); }
  Status ErrorAt(size_t pos, const std::string& what) const;
  // The character at the next token, quoted ("'x'", "'\xe2'"), or "end of text".
  std::string Found() const;
  std::string_view text() const { return text_; }

 private:
  void SkipSpace();
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace reshard

#endif  // RESHARD_SRC_NOTATION_TEXT_CURSOR_H_

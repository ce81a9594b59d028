#include <algorithm>
#include <cstdio>

#include "json.h"
#include "policy.h"

namespace amon::dsl {

void Diagnostics::add(Diagnostic d) {
  if (d.severity == Diagnostic::Severity::Error) ++errors_;
  if (d.severity == Diagnostic::Severity::Warning) ++warnings_;
  diags_.push_back(std::move(d));
}

void Diagnostics::error(const SourceLoc& loc, std::string msg, std::string hint) {
  add({Diagnostic::Severity::Error, loc, std::move(msg), std::move(hint)});
}
void Diagnostics::warning(const SourceLoc& loc, std::string msg, std::string hint) {
  add({Diagnostic::Severity::Warning, loc, std::move(msg), std::move(hint)});
}
void Diagnostics::note(const SourceLoc& loc, std::string msg, std::string hint) {
  add({Diagnostic::Severity::Note, loc, std::move(msg), std::move(hint)});
}

void Diagnostics::add_source(const std::string& file, std::string text) {
  if (!sources_.count(file)) source_order_.push_back(file);
  sources_[file] = std::move(text);
}

void Diagnostics::sort_by_location(size_t from) {
  if (from >= diags_.size()) return;
  std::vector<std::vector<Diagnostic>> groups;
  for (size_t i = from; i < diags_.size(); ++i) {
    if (diags_[i].severity != Diagnostic::Severity::Note || groups.empty()) groups.emplace_back();
    groups.back().push_back(std::move(diags_[i]));
  }
  auto rank = [&](const std::string& f) {
    auto it = std::find(source_order_.begin(), source_order_.end(), f);
    return it == source_order_.end() ? -1 : static_cast<int>(it - source_order_.begin());
  };
  std::stable_sort(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
    const SourceLoc &x = a.front().loc, &y = b.front().loc;
    int rx = rank(x.file), ry = rank(y.file);
    if (rx != ry) return rx < ry;
    if (x.line != y.line) return x.line < y.line;
    return x.col < y.col;
  });
  diags_.resize(from);
  for (auto& g : groups)
    for (auto& d : g) diags_.push_back(std::move(d));
}

const std::string* Diagnostics::source(const std::string& file) const {
  auto it = sources_.find(file);
  return it == sources_.end() ? nullptr : &it->second;
}

void Diagnostics::clear() {
  diags_.clear();
  sources_.clear();
  source_order_.clear();
  errors_ = warnings_ = 0;
}

static const char* severity_name(Diagnostic::Severity s) {
  switch (s) {
    case Diagnostic::Severity::Error: return "error";
    case Diagnostic::Severity::Warning: return "warning";
    case Diagnostic::Severity::Note: return "note";
  }
  return "?";
}

static std::string_view line_of(const std::string& src, int line) {
  size_t start = 0;
  for (int l = 1; l < line; ++l) {
    size_t nl = src.find('\n', start);
    if (nl == std::string::npos) return {};
    start = nl + 1;
  }
  size_t end = src.find('\n', start);
  if (end == std::string::npos) end = src.size();
  std::string_view v(src.data() + start, end - start);
  if (!v.empty() && v.back() == '\r') v.remove_suffix(1);
  return v;
}

std::string Diagnostics::render_text(const std::function<const std::string*(const std::string&)>& lookup) const {
  std::string out;
  for (const auto& d : diags_) {
    const SourceLoc& l = d.loc;
    out += l.file;
    if (l.line > 0) out += ":" + std::to_string(l.line) + ":" + std::to_string(l.col);
    out += std::string(": ") + severity_name(d.severity) + ": " + d.message + "\n";
    const std::string* src = lookup ? lookup(l.file) : source(l.file);
    if (src && l.line > 0) {
      std::string_view text = line_of(*src, l.line);
      // Very long lines are shown cut down around nothing: the caret line
      // would be useless anyway and the limit check already names the line.
      if (text.size() <= 512) {
        out.append(text);
        out += "\n";
        // Column counts bytes; the caret line mirrors tabs and counts one
        // space per UTF-8 character so it lines up in a terminal.
        std::string caret;
        int col = std::max(1, l.col);
        int end = std::max(l.end_col, col + 1);
        for (int i = 0; i + 1 < col && i < static_cast<int>(text.size()); ++i) {
          unsigned char c = text[i];
          if (c == '\t') caret += '\t';
          else if ((c & 0xC0) != 0x80) caret += ' ';
        }
        if (col - 1 > static_cast<int>(text.size())) caret.append(col - 1 - text.size(), ' ');
        caret += '^';
        for (int i = col; i < end - 1 && i < static_cast<int>(text.size()); ++i) {
          unsigned char c = text[i];
          if ((c & 0xC0) != 0x80) caret += '~';
        }
        out += caret + "\n";
      }
    }
    if (!d.hint.empty()) out += "hint: " + d.hint + "\n";
  }
  return out;
}

static std::string json_string(std::string_view s) { return json_quote(s); }

std::string Diagnostics::render_json() const {
  std::string o = "[";
  bool first = true;
  for (const auto& d : diags_) {
    o += first ? "\n  " : ",\n  ";
    first = false;
    o += "{\"severity\": " + json_string(severity_name(d.severity)) + ", \"file\": " + json_string(d.loc.file) +
         ", \"line\": " + std::to_string(d.loc.line) + ", \"col\": " + std::to_string(d.loc.col) +
         ", \"end_col\": " + std::to_string(d.loc.end_col) + ", \"message\": " + json_string(d.message) +
         ", \"hint\": " + json_string(d.hint) + "}";
  }
  o += first ? "]\n" : "\n]\n";
  return o;
}

}  // namespace amon::dsl

// Reads one domain name per line, prints "name<TAB>registrable" per line
// (registrable empty when libpsl finds none, e.g. for a bare public suffix).
// Names are lowercased and stripped of trailing dots first, as amon counts them.
#include <libpsl.h>

#include <cctype>
#include <iostream>
#include <string>

int main() {
  const psl_ctx_t* psl = psl_builtin();
  if (!psl) {
    std::cerr << "amon-e2e-psl: libpsl has no builtin list\n";
    return 1;
  }
  std::ios::sync_with_stdio(false);
  std::string line;
  while (std::getline(std::cin, line)) {
    std::string n = line;
    for (auto& ch : n) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    while (!n.empty() && n.back() == '.') n.pop_back();
    const char* r = n.empty() ? nullptr : psl_registrable_domain(psl, n.c_str());
    std::cout << line << '\t' << (r ? r : "") << '\n';
  }
  return 0;
}

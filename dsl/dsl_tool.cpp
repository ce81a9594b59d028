// amon-dsl: the policy tools without the engine (no DPDK), for CI and for
// writing policies on a workstation. `amon lint|fields|actions` call the
// same functions.
#include <cstdio>
#include <cstring>
#include <string>

#include "policy.h"

int main(int argc, char** argv) {
  using namespace amon::dsl;
  if (argc < 2) {
    std::fprintf(stderr, "usage: amon-dsl lint|fields|actions|doc-sync [ARGS]\n");
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "lint") return lint_main(argc - 2, argv + 2);
  if (cmd == "fields") return fields_main(argc - 2, argv + 2);
  if (cmd == "actions") return actions_main(argc - 2, argv + 2);
  if (cmd == "registry-markdown") {
    std::fputs(registry_markdown().c_str(), stdout);
    return 0;
  }
  if (cmd == "doc-sync") {
    // doc-sync [--update] doc/language.md
    bool update = argc > 2 && std::strcmp(argv[2], "--update") == 0;
    int i = update ? 3 : 2;
    if (i >= argc) {
      std::fprintf(stderr, "usage: amon-dsl doc-sync [--update] FILE.md\n");
      return 2;
    }
    std::string msg;
    int rc = doc_sync(argv[i], update, msg);
    std::fprintf(rc ? stderr : stdout, "%s\n", msg.c_str());
    return rc;
  }
  std::fprintf(stderr, "amon-dsl: unknown command '%s'\n", cmd.c_str());
  return 2;
}

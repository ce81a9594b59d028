// The control plane's policy handling, shared by start-up, SIGHUP reloads
// and `amon check`: compile every consumer's policy with the compiler and
// checker `amon lint` uses, and name what was compiled by a digest.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine.h"

namespace amon {

// SHA-256 (hex) of a compiled policy: its canonical form (`amon lint
// --dump`, which covers includes as expanded) and the bytes of every key it
// loaded, so an edited include or a rotated key file changes it.
std::string policy_digest(const dsl::Policy& p);
// ... of its keys only (a reload says whether keys or rules changed).
std::string keys_digest(const dsl::Policy& p);

// Compiles every consumer's policy. All or nothing: false when any fails,
// with every diagnostic (`file:line:col: error: ...`, as `amon lint`
// prints them) in `diags`; warnings are in `diags` on success too.
bool compile_all(const EngineConfig& cfg, std::vector<std::shared_ptr<const dsl::Policy>>& out, std::string& diags);

// `amon check`: the configuration, every policy, every key, the outputs
// and the vdevs' devargs, without starting a port or touching an output.
// Prints a summary on stdout, problems on stderr; returns 0 or 2.
int check_config(const EngineConfig& cfg, const std::string& config_path);

}  // namespace amon

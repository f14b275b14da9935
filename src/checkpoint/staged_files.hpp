#pragma once
// Hidden temporary files of the checkpoint writers: their names, and the removal of those a dead writer left.
//   ".<file>.<pid>.<n>.staged"  write_quantized_checkpoint, quantize_checkpoint (renamed into place at commit)
//   ".<file>.tmp.<pid>.<n>"     write_file_atomically (write_safetensors, write_index_json, the weight cache)
// Neither ends in ".safetensors", so a loader that lists a directory never sees one.
#include <string>
#include <vector>

#include "qlinear/status.hpp"

namespace qlinear::detail {

// `dir`/.<file>.<this pid>.<counter>.staged
std::string staged_name(const std::string& dir, const std::string& file);

// The writer process id in a temporary's file name, or 0 when `name` is not one of the two forms above.
long temporary_owner(const std::string& name);

// Removes the temporaries in `dir` (not recursing) whose writer process no longer exists; returns their
// names. A process id that was reused by a live process keeps its files (they are removed later).
std::vector<std::string> remove_stale_temporaries(const std::string& dir);

// fsync of a directory, so that renames and removals in it are durable.
Status sync_directory(const std::string& dir);

}  // namespace qlinear::detail

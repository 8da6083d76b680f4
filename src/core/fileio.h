// Whole-file binary I/O for data preparation and checkpoints. A file is a
// list of pieces written back to back (so, e.g., AdamW's two moment buffers
// go to one file without being copied together first), fsynced before close.
// write_file_atomic goes through "<path>.tmp" and a rename, so readers see
// either the old file or the complete new one.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string>

namespace parallm {

struct FilePiece {
  void* data;
  size_t bytes;
};
struct ConstFilePiece {
  const void* data;
  size_t bytes;
};

void write_file(const std::string& path, std::initializer_list<ConstFilePiece> pieces);
void write_file_atomic(const std::string& path, std::initializer_list<ConstFilePiece> pieces);
// Reads exactly the pieces' total size; throws IoError naming the file if its
// size differs (truncated, or written for another model).
void read_file(const std::string& path, std::initializer_list<FilePiece> pieces);
// `bytes` at `offset` of a file that must be exactly `file_size` bytes long
// (IoError naming the file otherwise): a slice of a checkpoint shard.
void read_file_range(const std::string& path, size_t file_size, size_t offset, void* out, size_t bytes);
// A whole (small) text file; IoError "[where] cannot read <path>: <reason>".
std::string read_text_file(const std::string& path, const std::string& where);
// Creates directory `path` and its parents if need be; IoError "[where] cannot
// create <what> <path>: <reason>" otherwise (a file of that name included).
void make_directories(const std::string& path, const std::string& where, const std::string& what);

}  // namespace parallm

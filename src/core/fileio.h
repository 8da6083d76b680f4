// Whole-file binary I/O for data preparation and checkpoints. A file is a
// list of pieces written back to back (so, e.g., AdamW's two moment buffers
// go to one file without being copied together first), fsynced before close.
// write_file_atomic goes through "<path>.tmp" and a rename, so readers see
// either the old file or the complete new one.
// Every reader opens through RegularFile, which refuses a FIFO, a directory,
// a device or a socket by name before reading (a FIFO would block the open,
// a directory fails later with a message that names no file).
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

// A regular file open for reading. Stats the path first and opens it with
// O_NONBLOCK (a FIFO put there meanwhile must not block), then checks the open
// file again. IoError "[where] <path> is a FIFO (named pipe), not a regular
// file: ..." for anything else; "[where] cannot read <path>: <reason><hint>"
// when it cannot be opened (`hint`, e.g. how to make the file, follows the reason).
class RegularFile {
 public:
  RegularFile(const std::string& path, const std::string& where, const std::string& hint = "");
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  int fd() const { return fd_; }
  size_t size() const { return size_; }  // at open
  size_t current_size() const;           // now (the file may have shrunk or grown since)
  // Up to `bytes` at `offset` (pread, any thread); returns how many there were,
  // fewer only at the end of the file. IoError naming the file on a read error.
  size_t read_at(size_t offset, void* out, size_t bytes) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  size_t size_ = 0;
};

// "a FIFO (named pipe)", "a directory", ... for a file mode that is not a regular file.
std::string file_kind(unsigned mode);

void write_file(const std::string& path, std::initializer_list<ConstFilePiece> pieces);
// A file written piece by piece (created or truncated), for writers that
// produce it in parts: finish() fsyncs and closes it; IoError naming the file
// on any failure (after which the file is closed). Destroyed unfinished, it is
// closed without a sync.
class FileWriter {
 public:
  explicit FileWriter(const std::string& path);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  void append(const void* data, size_t bytes);
  void finish();

 private:
  std::string path_;
  int fd_ = -1;
};
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

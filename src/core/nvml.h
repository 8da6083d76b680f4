// The GPUs' health as NVIDIA's management library (NVML) reports it, for
// `parallm doctor`: loaded at run time (dlopen of PARALLM_NVML_LIBRARY,
// libnvidia-ml.so.1 by default, the driver's), so every build has it and a
// machine without the driver says why. For every GPU of the node: its name,
// UUID and memory, the ECC mode and error counts, retired pages (pre-A100)
// and remapped rows (A100 and later). What a GPU does not support is left
// unknown, never counted as healthy or broken. The C interface is declared
// here from NVML's documented ABI (no header needed to build).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace parallm::nvml {

struct Gpu {
  int index = 0;            // NVML's (the node's order, whatever CUDA_VISIBLE_DEVICES says)
  std::string unreachable;  // NVML's error where it could not reach this GPU (nothing else known then)
  std::string name, uuid;
  uint64_t mem_total = 0, mem_used = 0;                                      // bytes
  std::optional<bool> ecc_on;                                                // unknown where ECC is not supported
  std::optional<uint64_t> ecc_uncorrected_volatile, ecc_corrected_volatile;  // since the driver loaded
  std::optional<uint64_t> ecc_uncorrected_aggregate;                         // over the GPU's life
  std::optional<unsigned> retired_single_bit, retired_double_bit;            // retired pages by cause
  std::optional<bool> retired_pending;                                       // retirement waits for a reset
  std::optional<unsigned> rows_correctable, rows_uncorrectable;              // remapped rows
  std::optional<bool> rows_pending, rows_failed;                             // a remap waits for a reset / failed
};

struct Report {
  bool loaded = false;  // the library loaded and initialized
  std::string why;      // when not: the reason
  std::string driver;   // the driver's version
  std::vector<Gpu> gpus;
};

// Loads the library, reads every GPU, and unloads it. Never throws: a failure is in `why`.
Report query();
// "NVIDIA H200 (GPU-5c0e...): ECC on; volatile ECC errors 0 uncorrected, 0 corrected; ..." (one line).
std::string describe(const Gpu& g);
// Why this GPU should not run a job ("" if nothing is wrong): unreachable, uncorrected volatile ECC errors, retired
// pages or remapped rows waiting for a reset, a failed remap.
std::string problems(const Gpu& g);

}  // namespace parallm::nvml

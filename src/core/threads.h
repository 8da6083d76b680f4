// One thread pool for everything: OpenMP (GNU libgomp), shared by parallm's
// kernels and by oneDNN's GEMM (built on the same OpenMP runtime), so there
// are never two pools competing for the cores.
#pragma once

namespace parallm {
int num_threads();
void set_num_threads(int n);  // n <= 0: keep the OpenMP default; n > max_threads() (core/host.h): ConfigError
}  // namespace parallm

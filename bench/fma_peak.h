// The machine's floating-point peak as a benchmark measures it: independent double-precision
// multiply-add chains in the widest vectors the machine has (Google Highway, chosen at run time),
// on 1..N threads. The compute roof of `hetmem bench pic`'s roofline.
#pragma once

namespace bench {

struct FmaPeak {
  double gflops = 0;           // all threads together, 2 flops per lane per multiply-add
  const char *target = "";     // the instruction set measured ("AVX3", "AVX2", ...)
};

// Best of `reps` timed runs of about `seconds` each on `threads` threads.
FmaPeak fma_peak(int threads, int reps, double seconds);

}  // namespace bench

// A C++ program whose steps call a C++ function of another library through the dynamic linker
// (std::chrono::steady_clock::now, in libstdc++): `--iteration-at` by its C++ name. Prints the
// steps it made. Usage: prog_cxx_steps [STEPS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char **argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 5;
  std::vector<double> field(1 << 16, 1.0);
  long long ticks = 0;
  for (int s = 0; s < steps; ++s) {
    ticks += std::chrono::steady_clock::now().time_since_epoch().count() & 1;
    for (double &x : field) x *= 1.0001;
  }
  std::printf("%d steps %lld\n", steps, ticks * 0);
  return 0;
}

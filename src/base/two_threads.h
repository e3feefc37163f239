// Work split between the calling thread and one more.
#pragma once
#include <functional>
#include <system_error>
#include <thread>

namespace hm {

// Runs `beside` on a second thread and `here` on this one and returns when both are done. When
// no thread can be started (a process or container limit), runs `beside` after `here` on this
// one: the work is the same, only slower.
inline void on_two_threads(const std::function<void()> &here, const std::function<void()> &beside) {
  std::thread second;
  try {
    second = std::thread(beside);
  } catch (const std::system_error &) {
  }
  here();
  if (second.joinable()) second.join();
  else beside();
}

}  // namespace hm

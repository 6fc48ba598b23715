// Runs one function per rank, each in a process of its own (fork, before the test process
// starts any thread), and reports every rank's exit code. A rank's function returns its exit
// code; a rank that hangs past the deadline is killed and reported as -1.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <random>
#include <thread>
#include <vector>

namespace peregrine::testing {

// A TCP port that was free a moment ago on 127.0.0.1, below Linux's ephemeral range
// (32768 on): the kernel's own choice (port 0) is an ephemeral port that another test's
// outgoing connection may take as its source port before the rendezvous binds it.
inline int FreeLoopbackPort() {
  std::mt19937 rng(static_cast<uint32_t>(::getpid()) * 2654435761u ^
                   static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = 20000 + static_cast<int>(rng() % 12000);
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (free) return port;
  }
  return 0;
}

inline std::vector<int> RunRanks(int num_ranks, const std::function<int(int rank)>& fn,
                                 std::chrono::seconds deadline = std::chrono::seconds(120)) {
  std::vector<pid_t> pids;
  for (int r = 0; r < num_ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 99;
      try {
        code = fn(r);
      } catch (...) {
        code = 98;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(num_ranks), -1);
  const auto end = std::chrono::steady_clock::now() + deadline;
  size_t left = pids.size();
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] == 0) continue;
      int status = 0;
      if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -2;
        pids[i] = 0;
        --left;
      }
    }
    if (left > 0 && std::chrono::steady_clock::now() > end) {
      for (pid_t p : pids)
        if (p != 0) {
          ::kill(p, SIGKILL);
          ::waitpid(p, nullptr, 0);
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

}  // namespace peregrine::testing

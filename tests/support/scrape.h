// Reads a Prometheus exporter as Prometheus would: a plain HTTP GET of
// /metrics over a socket, and one series' value out of the text.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <string>

namespace scdino::testing {

/// The exposition text served on 127.0.0.1:`port`, or "" when nothing answers.
inline std::string Scrape(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

/// The value of `series` (name with its labels as written), or -1 when absent.
inline double Value(const std::string& text, const std::string& series) {
  std::smatch m;
  const std::regex re("\n" + std::regex_replace(series, std::regex(R"([{}\[\]().+*?^$|\\])"), R"(\$&)") +
                      " ([-+0-9.eE]+)");
  if (!std::regex_search(text, m, re)) return -1;
  return std::stod(m[1]);
}

}  // namespace scdino::testing

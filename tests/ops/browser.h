// Headless Chromium (Debian's package) for the tests of what a person sees: the DOM after a
// page's script ran, and screenshots. No network: every host resolves to nothing and a proxy
// that does not exist stands for any other route, so a page that tried to load something from
// elsewhere would show it broken.
#pragma once

#include <cstdlib>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "tests/ops/ops_util.h"

namespace driftd::testing {

/// Chromium with nothing that reaches out of the machine, and a profile of its own.
/// `local_http`: loopback HTTP is allowed (the status page of a daemon on 127.0.0.1).
inline std::vector<std::string> Chromium(const std::string& profile, bool local_http = true) {
  std::vector<std::string> argv = {Which("chromium"),
                                   "--headless",
                                   "--no-sandbox",
                                   "--disable-gpu",
                                   "--disable-quic",
                                   "--no-first-run",
                                   "--disable-background-networking",
                                   "--disable-component-update",
                                   "--disable-sync",
                                   "--user-data-dir=" + profile,
                                   "--window-size=1400,2000",
                                   "--virtual-time-budget=15000"};
  if (!local_http) {
    argv.push_back("--host-resolver-rules=MAP * ~NOTFOUND");
    argv.push_back("--proxy-server=127.0.0.1:9");
    argv.push_back("--allow-file-access-from-files");
  }
  return argv;
}

/// Runs `argv` with its output into `output`; the output.
inline std::string RunToFile(std::vector<std::string> argv, const std::string& output) {
  auto child = ChildProcess::Start(argv, output);
  auto status = child.Wait(std::chrono::seconds(120));
  REQUIRE(status.has_value());
  return ReadFile(output);
}

/// The DOM of `url` once its script ran (Chromium's --dump-dom).
inline std::string DumpDom(const std::string& url, const std::string& profile,
                           const std::string& output, bool local_http = true) {
  std::vector<std::string> argv = Chromium(profile, local_http);
  argv.push_back("--dump-dom");
  argv.push_back(url);
  return RunToFile(argv, output);
}

/// The attributes of one start tag ("<td class=\"cell\" data-model=\"m\">").
inline std::map<std::string, std::string> Attributes(const std::string& tag) {
  std::map<std::string, std::string> out;
  static const std::regex attribute(R"re(([a-z0-9-]+)="([^"]*)")re");
  for (auto it = std::sregex_iterator(tag.begin(), tag.end(), attribute);
       it != std::sregex_iterator(); ++it) {
    out[(*it)[1].str()] = (*it)[2].str();
  }
  return out;
}

/// Every start tag of element `name` whose class attribute holds `css_class` (a word of it),
/// with its attributes; "text" holds the text up to the next tag.
inline std::vector<std::map<std::string, std::string>> Elements(const std::string& dom,
                                                                const std::string& name,
                                                                const std::string& css_class) {
  std::vector<std::map<std::string, std::string>> out;
  const std::regex tag("<" + name + R"re(( [^>]*)?>([^<]*))re");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), tag); it != std::sregex_iterator();
       ++it) {
    auto attributes = Attributes((*it)[1].str());
    const std::string classes = " " + attributes["class"] + " ";
    if (!css_class.empty() && classes.find(" " + css_class + " ") == std::string::npos) continue;
    attributes["text"] = (*it)[2].str();
    out.push_back(std::move(attributes));
  }
  return out;
}

inline double Number(const std::string& text) { return std::strtod(text.c_str(), nullptr); }

/// The part of `dom` from the element with id `id` to the element with id `next_id` (or the
/// end): one section of a page.
inline std::string Section(const std::string& dom, const std::string& id,
                           const std::string& next_id) {
  const size_t start = dom.find("id=\"" + id + "\"");
  if (start == std::string::npos) return "";
  const size_t end = dom.find("id=\"" + next_id + "\"", start);
  return dom.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

}  // namespace driftd::testing

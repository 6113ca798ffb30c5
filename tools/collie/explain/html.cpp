// `collie explain --format html`: explain/page.html (embedded at build
// time) with the JSON document inside it.
#include <string>

#include "explain.hpp"

namespace collie::cli::explain {

namespace {

constexpr const char* kPage =
#include "explain_page.inc"
    ;

}  // namespace

std::string to_html(const nlohmann::ordered_json& doc) {
  // Inside <script>, "</" could end the element early: JSON may write it "<\/".
  std::string data = doc.dump();
  for (std::size_t at = data.find("</"); at != std::string::npos; at = data.find("</", at + 3))
    data.replace(at, 2, "<\\/");
  std::string page = kPage;
  const std::string marker = "/*COLLIE_DATA*/";
  page.replace(page.find(marker), marker.size(), data);
  return page;
}

}  // namespace collie::cli::explain

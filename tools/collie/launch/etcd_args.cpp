// `collie launch --rdzv-backend etcd`'s command line (launch/etcd_args.hpp).
#include "etcd_args.hpp"

#include <fmt/format.h>

#include <collie/environment.hpp>
#include <collie/error.hpp>

namespace collie::cli {

namespace {

constexpr int kEtcdPort = 2379;

// "a,b:2380" -> "a:2379,b:2380": torchrun's etcd takes hosts without a port.
std::string with_ports(const std::string& text) {
  std::string out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const auto comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? text.size() + 1 : comma + 1;
    std::string bare = item;
    for (const std::string scheme : {"https://", "http://"})
      if (bare.starts_with(scheme)) bare = bare.substr(scheme.size());
    const bool v6 = bare.starts_with("[");
    const bool has_port = v6 ? bare.find("]:") != std::string::npos
                             : bare.find(':') != std::string::npos;
    if (!item.empty() && !has_port) item += ":" + std::to_string(kEtcdPort);
    out += (out.empty() ? "" : ",") + item;
  }
  return out;
}

std::string from_environment(const environment::Variable& v) {
  return environment::get(v).value_or("");
}

}  // namespace

bool is_etcd_backend(const std::string& backend) {
  return backend == "etcd" || backend == "etcd-v2";
}

bool apply_etcd_conf(LaunchArgs& a, const std::string& key, const std::string& value) {
  if (key == "protocol") {
    if (value != "http" && value != "https") {
      throw Error(fmt::format("collie launch: --rdzv-conf protocol={}: http or https", value));
    }
    a.etcd_protocol = value;
  } else if (key == "cacert") {
    a.etcd_cacert = value;
  } else if (key == "cert") {
    a.etcd_cert = value;
  } else if (key == "key") {
    a.etcd_key = value;
  } else {
    return false;
  }
  return true;
}

void resolve_etcd_rendezvous(LaunchArgs& a) {
  a.etcd = true;
  if (a.standalone) throw Error("collie launch: --standalone has no rendezvous: drop --rdzv-backend etcd");
  if (a.rdzv_endpoint.empty()) {
    throw Error(
        "collie launch: --rdzv-backend etcd needs --rdzv-endpoint HOST:PORT[,HOST:PORT...]: "
        "the members of the etcd cluster the nodes meet in (docs/launching.md)");
  }
  if (a.rdzv_id.empty() || a.rdzv_id == "none") {
    throw Error(
        "collie launch: --rdzv-backend etcd needs --rdzv-id: the job's own name in etcd (its "
        "keys live under /collie/launch/<id>/), the same on every node and new for each job, "
        "e.g. --rdzv-id=$SLURM_JOB_ID");
  }
  if (a.rdzv_id.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                  "0123456789._-") != std::string::npos) {
    throw Error(fmt::format(
        "collie launch: --rdzv-id '{}': letters, digits, '.', '_' and '-' only", a.rdzv_id));
  }
  a.etcd_endpoints = store::parse_etcd_endpoints(with_ports(a.rdzv_endpoint));
  if (a.etcd_protocol == "http") {
    for (auto& e : a.etcd_endpoints)
      if (e.find("://") == std::string::npos) e = "http://" + e;
  }
  if (a.etcd_cacert.empty()) a.etcd_cacert = from_environment(environment::kEtcdCacert);
  if (a.etcd_cert.empty()) a.etcd_cert = from_environment(environment::kEtcdCert);
  if (a.etcd_key.empty()) a.etcd_key = from_environment(environment::kEtcdKey);
  // The same checks as the store's, said now, before anything starts.
  store::EtcdStore::check_options(etcd_launch_options(a));
  if (a.node_rank) {
    a.notes.push_back(fmt::format(
        "--node-rank {} is ignored: with etcd the nodes are numbered as they join each round",
        *a.node_rank));
    a.node_rank.reset();
  }
  if (a.insecure && a.etcd_cert.empty()) {
    a.notes.push_back(
        "WARNING: --insecure: etcd is reached over plain HTTP without certificates; anyone who "
        "reaches it can read and change this job's rendezvous");
  }
  a.node_rank_value = -1;
  a.host_store = false;
}

store::EtcdOptions etcd_launch_options(const LaunchArgs& a) {
  store::EtcdOptions o;
  o.endpoints = a.etcd_endpoints;
  o.prefix = "/collie/launch/" + a.rdzv_id + "/";
  o.tls = {a.etcd_cacert, a.etcd_cert, a.etcd_key};
  o.insecure = a.insecure && a.etcd_cert.empty();
  o.timeout = std::chrono::seconds(300);
  return o;
}

}  // namespace collie::cli

// collie's etcd store for Python (etcd_binding.hpp): what collie_torch's
// etcd:// init method (collie_torch/etcd.py) meets in. Every call releases
// the GIL while it waits on etcd.
#include "etcd_binding.hpp"

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <collie/store/etcd_store.hpp>

namespace collie_torch {

namespace py = pybind11;

void add_etcd(py::module& m) {
  using collie::store::EtcdStore;
  using Ms = std::chrono::milliseconds;
  py::class_<EtcdStore, std::shared_ptr<EtcdStore>>(
      m, "EtcdStore",
      "collie's Store interface on an etcd cluster (collie/store/etcd_store.hpp): keys under "
      "`prefix`, TLS with a client certificate unless `insecure`.")
      .def(py::init([](std::vector<std::string> endpoints, std::string prefix, std::string cacert,
                       std::string cert, std::string key, bool insecure, Ms timeout) {
             collie::store::EtcdOptions o;
             o.endpoints = std::move(endpoints);
             o.prefix = std::move(prefix);
             o.tls = {std::move(cacert), std::move(cert), std::move(key)};
             o.insecure = insecure;
             o.timeout = timeout;
             return std::make_shared<EtcdStore>(std::move(o));
           }),
           py::arg("endpoints"), py::arg("prefix"), py::arg("cacert") = "", py::arg("cert") = "",
           py::arg("key") = "", py::arg("insecure") = false,
           py::arg("timeout") = Ms(std::chrono::seconds(300)),
           py::call_guard<py::gil_scoped_release>())
      .def("set",
           [](EtcdStore& s, const std::string& key, const py::bytes& value) {
             std::string v = value;
             py::gil_scoped_release unlocked;
             s.set(key, v);
           })
      .def("get",
           [](EtcdStore& s, const std::string& key, Ms timeout) {
             std::string v;
             {
               py::gil_scoped_release unlocked;
               v = s.get(key, timeout);
             }
             return py::bytes(v);
           })
      .def("add", [](EtcdStore& s, const std::string& key, std::int64_t delta) { return s.add(key, delta); },
           py::call_guard<py::gil_scoped_release>())
      .def("compare_set",
           [](EtcdStore& s, const std::string& key, const py::bytes& expected,
              const py::bytes& desired) {
             std::string e = expected, d = desired;
             collie::store::CompareSetResult r;
             {
               py::gil_scoped_release unlocked;
               r = s.compare_set(key, e, d);
             }
             return py::bytes(r.current.value_or(""));
           })
      .def("check", [](EtcdStore& s, const std::vector<std::string>& keys) { return s.check(keys); },
           py::call_guard<py::gil_scoped_release>())
      .def("wait",
           [](EtcdStore& s, const std::vector<std::string>& keys, Ms timeout) { s.wait(keys, timeout); },
           py::call_guard<py::gil_scoped_release>())
      .def("delete_key", [](EtcdStore& s, const std::string& key) { return s.delete_key(key); },
           py::call_guard<py::gil_scoped_release>())
      .def("num_keys", [](EtcdStore& s) { return s.num_keys(); },
           py::call_guard<py::gil_scoped_release>())
      .def("describe", &EtcdStore::describe);
  m.def("parse_etcd_endpoints", &collie::store::parse_etcd_endpoints, py::arg("text"),
        "\"h1:2379,h2:2379\" as a list; raises naming the part that is not host:port.");
}

}  // namespace collie_torch

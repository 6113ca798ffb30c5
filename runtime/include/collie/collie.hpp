// collie: collective communication over plain TCP.
//
// This header brings in the whole public API. Today that is the rendezvous
// store (collie/store/...): a server to embed, its blocking and asynchronous
// clients, and namespaced views; and the resolution of a job's rank, size
// and store address from the environment (collie/job_config.hpp).
#pragma once

#include <collie/error.hpp>
#include <collie/job_config.hpp>
#include <collie/job_store.hpp>
#include <collie/log.hpp>
#include <collie/store/async_client.hpp>
#include <collie/store/client.hpp>
#include <collie/store/file_store.hpp>
#include <collie/store/prefix_store.hpp>
#include <collie/store/server.hpp>
#include <collie/store/store.hpp>
#include <collie/transport/interfaces.hpp>
#include <collie/version.hpp>

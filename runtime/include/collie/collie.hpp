// collie: collective communication over plain TCP.
//
// This header brings in the whole public API: collie::init() and the process
// group with point-to-point messages and collectives (collie/process_group.hpp);
// the element types (collie/dtype.hpp); reduce ops and kernels
// (collie/reduce.hpp); the algorithms (collie/collectives/...); the resolution of a job's rank,
// size and store address from the environment (collie/job_config.hpp); the rendezvous store
// (collie/store/...); and the transport underneath (collie/transport/...).
#pragma once

#include <collie/address.hpp>
#include <collie/collectives/algorithms.hpp>
#include <collie/collectives/cost.hpp>
#include <collie/dtype.hpp>
#include <collie/error.hpp>
#include <collie/interrupt.hpp>
#include <collie/job_config.hpp>
#include <collie/job_store.hpp>
#include <collie/log.hpp>
#include <collie/memory.hpp>
#include <collie/process_group.hpp>
#include <collie/reduce.hpp>
#include <collie/store/async_client.hpp>
#include <collie/store/client.hpp>
#include <collie/store/file_store.hpp>
#include <collie/store/prefix_store.hpp>
#include <collie/store/server.hpp>
#include <collie/store/store.hpp>
#include <collie/transport/interfaces.hpp>
#include <collie/transport/open.hpp>
#include <collie/transport/peer_router.hpp>
#include <collie/transport/tcp.hpp>
#include <collie/transport/transport.hpp>
#include <collie/version.hpp>

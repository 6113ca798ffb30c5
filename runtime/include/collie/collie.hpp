// collie: collective communication over plain TCP.
//
// What a program that runs collectives needs, and nothing more: collie::init()
// and the process group, with point-to-point messages, collectives and their
// Work (collie/process_group.hpp); the element types (collie/dtype.hpp);
// reduce ops (collie/reduce.hpp); where buffers live (collie/memory.hpp);
// the job's settings from the environment (collie/job_config.hpp); and the
// errors collie throws (collie/error.hpp). It brings no Asio, sockets or
// servers: the rendezvous store (collie/store/...) and the transport
// underneath (collie/transport/...) have headers of their own, for programs
// that use them directly.
#pragma once

#include <collie/dtype.hpp>
#include <collie/error.hpp>
#include <collie/job_config.hpp>
#include <collie/memory.hpp>
#include <collie/process_group.hpp>
#include <collie/reduce.hpp>
#include <collie/version.hpp>

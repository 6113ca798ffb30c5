// Ending collie's waits from a signal handler.
//
// A process with SIGTERM's default action dies at once, wherever it waits.
// A program that handles SIGTERM itself (to save a checkpoint, or print what
// it measured) would otherwise stay blocked in a stuck collective until its
// timeout. collie::init() therefore wraps a SIGTERM handler the program has
// already installed (its handler still runs, after collie's), and a program
// that installs one later calls interrupt_waits() from it:
//
//   void on_term(int s) { collie::interrupt_waits(s); stop = true; }
//
// From then on every wait in collie (collectives, point-to-point, Work::wait)
// ends within about 50 ms with an InterruptedError naming the signal and the
// call. It stays so until resume_waits(): a process asked to stop should
// not start anything new.
#pragma once

#include <string>

namespace collie {

// Async-signal-safe: sets a flag that collie's waits look at.
void interrupt_waits(int signal_number) noexcept;

// The signal given to interrupt_waits(), or 0.
int waits_interrupted() noexcept;

// "SIGTERM", "SIGINT", "signal 10"; for waits_interrupted()'s value.
std::string signal_name(int signal_number);

// Lets waits run again.
void resume_waits() noexcept;

// Wraps the program's SIGTERM handler, if it has one (not the default, not
// ignored), so that it interrupts waits first; called by collie::init().
// Once per process; a handler installed later is the program's own.
void chain_sigterm_handler();

}  // namespace collie

"""torch's own distributed tests on collie, held to gloo's results.

    python3 torch_suite_test.py WORLD [WORLD...] [-k SUBSTRING]

Debian's python3-torch ships torch's test suite for torch.distributed
backends (torch/testing/_internal/distributed/distributed_test.py, the
class DistributedTest._DistTestBase that upstream's
test/distributed/test_distributed_spawn.py runs per backend). This runs it
as that script does, on each world size given, in three passes, each in a
process of its own (the suite reads its backend when imported):

  gloo            the suite on gloo: what a CPU backend is expected to pass;
  collie          the suite on collie_torch's backend, with "collie" put in
                  every feature set of the suite that gloo is in;
  collie-as-gloo  the tests the suite reserves for the name "gloo" (skipped
                  on the collie pass, passed on gloo), once more with
                  collie's groups made under that name.

It fails when a test that passes on gloo does not pass on collie, and
lists what it skips and why. Each test's ranks are forked from the pass's
process, which imported torch once (the suite's spawn would import it
again in every rank of every test). Exit 77 (skipped) where the suite or
torch is missing.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def stub_expecttest():
    """torch's test utilities import the expecttest package (PyPI's, for
    assertExpectedInline), which Debian does not package; the distributed
    tests use none of it, so a TestCase of unittest's stands in."""
    if "expecttest" in sys.modules:
        return
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import types
        import unittest
        module = types.ModuleType("expecttest")
        module.TestCase = unittest.TestCase
        module.ACCEPT = False
        sys.modules["expecttest"] = module


def run_pass(name, world, out_path, pattern):
    """One pass, in this process: the suite's tests, each outcome into out_path."""
    backend = "gloo" if name in ("gloo", "collie-as-gloo") else "collie"
    temp = tempfile.mkdtemp(prefix=f"collie-torch-suite-{name}-")
    os.environ.update({"BACKEND": backend, "WORLD_SIZE": str(world), "TEMP_DIR": temp,
                       "INIT_METHOD": f"file://{temp}/init",
                       "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": "120"})
    import unittest

    stub_expecttest()
    import torch
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d
    from torch.testing._internal.common_distributed import DistTestCases

    import collie_torch

    if name == "collie":
        for backends in DistTestCases.backend_feature.values():
            if "gloo" in backends:
                backends.add("collie")
        DistTestCases.backend_feature["plugin"].add("collie")
    if name == "collie-as-gloo":
        # torch makes a "gloo" group by calling ProcessGroupGloo(store, rank,
        # size, timeout=...): collie's group takes its place. torch 2.6 then
        # checks isinstance(group, ProcessGroupGloo), which collie's pass;
        # the class's other names are gloo's.
        gloo_class = c10d.ProcessGroupGloo

        class StandsInForGloo(type):
            def __call__(cls, store, rank, size, timeout=c10d.default_pg_timeout):
                return collie_torch.create_process_group(store, rank, size, timeout, "gloo")

            def __instancecheck__(cls, group):
                return True

            def __getattr__(cls, attribute):
                return getattr(gloo_class, attribute)

        class CollieAsGloo(metaclass=StandsInForGloo):
            pass

        c10d.ProcessGroupGloo = CollieAsGloo

        # DDP's logger reads gloo's own fields from any group named gloo (a
        # static_cast in torch 2.6's Logger::set_env_variables), which
        # collie's stand-in has not: its construction data goes unlogged.
        class LoggerOfAStandIn(dist.Logger):
            def set_construction_data_and_log(self, *args, **kwargs):
                pass

        dist.Logger = LoggerOfAStandIn

    from torch.testing._internal.distributed import distributed_test
    from torch.testing._internal.distributed.distributed_test import (DistributedTest,
                                                                      TestDistBackend)
    if name == "collie":
        # collie's calls are in torch's profiler as gloo's are ("collie:all_reduce").
        for backends in (distributed_test.PROFILING_SUPPORTED_BACKENDS,
                         distributed_test.CUDA_PROFILING_SUPPORTED_BACKENDS,
                         distributed_test.SEND_RECV_PROFILING_SUPPORTED_BACKENDS):
            backends.append("collie")

    class Suite(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            self._start_processes(torch.multiprocessing.get_context("fork").Process)

    tests = unittest.TestLoader().loadTestsFromTestCase(Suite)
    only = set(json.loads(os.environ["COLLIE_SUITE_ONLY"])) if "COLLIE_SUITE_ONLY" in os.environ \
        else None
    outcomes = {}

    class Record(unittest.TestResult):
        def addSuccess(self, test):
            outcomes[test._testMethodName] = "pass"

        def addFailure(self, test, err):
            outcomes[test._testMethodName] = "fail: " + self._exc_info_to_string(err, test)[-2000:]

        def addError(self, test, err):
            outcomes[test._testMethodName] = "fail: " + self._exc_info_to_string(err, test)[-2000:]

        def addSkip(self, test, reason):
            outcomes[test._testMethodName] = "skip: " + reason

        def addExpectedFailure(self, test, err):
            outcomes[test._testMethodName] = "pass"

        def addUnexpectedSuccess(self, test):
            outcomes[test._testMethodName] = "fail: an expected failure passed"

    selected = unittest.TestSuite(
        t for t in tests
        if (only is None or t._testMethodName in only) and pattern in t._testMethodName)
    selected.run(Record())
    with open(out_path, "w") as f:
        json.dump(outcomes, f, indent=1, sort_keys=True)
    del dist


def pass_in_process(name, world, pattern, only=None):
    """Runs one pass in a child process; its outcomes by test name."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    env = dict(os.environ)
    if only is not None:
        env["COLLIE_SUITE_ONLY"] = json.dumps(sorted(only))
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        code = subprocess.call([sys.executable, HERE, "--pass", name, str(world), out, pattern],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
        took = time.monotonic() - start
        if code != 0:
            log.seek(0)
            print(log.read()[-20000:])
            print(f"the {name} pass on {world} ranks ended with exit code {code}")
            sys.exit(1)
    with open(out) as f:
        outcomes = json.load(f)
    os.unlink(out)
    print(f"  {name}: {sum(o == 'pass' for o in outcomes.values())} passed, "
          f"{sum(o.startswith('fail') for o in outcomes.values())} failed, "
          f"{sum(o.startswith('skip') for o in outcomes.values())} skipped, of "
          f"{len(outcomes)} ({took:.0f} s)")
    return outcomes


def main(args):
    pattern = ""
    if "-k" in args:
        i = args.index("-k")
        pattern = args[i + 1]
        args = args[:i] + args[i + 2:]
    worlds = [int(a) for a in args] or [2, 3]
    stub_expecttest()
    os.environ.setdefault("BACKEND", "gloo")
    os.environ.setdefault("WORLD_SIZE", "2")
    os.environ.setdefault("TEMP_DIR", tempfile.gettempdir())
    try:
        import torch.testing._internal.distributed.distributed_test  # noqa: F401
    except Exception as e:  # noqa: BLE001 - whatever keeps the suite from importing
        print(f"SKIP: torch's distributed test suite does not import here: {e}")
        sys.exit(77)
    lost = []
    for world in worlds:
        print(f"torch's distributed tests on {world} ranks:")
        gloo = pass_in_process("gloo", world, pattern)
        collie = pass_in_process("collie", world, pattern)
        passed_on_gloo = {t for t, o in gloo.items() if o == "pass"}
        reserved = {t for t in passed_on_gloo if collie.get(t, "").startswith("skip")}
        as_gloo = pass_in_process("collie-as-gloo", world, pattern, reserved) if reserved else {}
        for test in sorted(passed_on_gloo):
            got = as_gloo.get(test) if test in reserved else collie.get(test)
            if got != "pass":
                lost.append((world, test, got or "not run"))
        on_collie = sum((as_gloo.get(t) if t in reserved else collie.get(t)) == "pass"
                        for t in gloo)
        print(f"  passing on gloo: {len(passed_on_gloo)}; of those, on collie: "
              f"{len(passed_on_gloo) - sum(1 for w, _, _ in lost if w == world)}; "
              f"on collie in all: {on_collie} of {len(gloo)}")
        for test in sorted(t for t, o in collie.items() if o.startswith("fail")):
            print(f"  fails on collie as on gloo: {test}"
                  f" (gloo: {gloo.get(test, 'not run')[:40]!r})")
        skipped = {}
        for test, o in collie.items():
            if o.startswith("skip") and test not in reserved:
                skipped.setdefault(o[len("skip: "):], []).append(test)
        for reason, names in sorted(skipped.items(), key=lambda kv: -len(kv[1])):
            print(f"  skipped on collie ({len(names)}): {reason}")
    for world, test, got in lost:
        print(f"LOST on {world} ranks: {test} passes on gloo, not on collie: {got}")
    sys.exit(1 if lost else 0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--pass":
        run_pass(sys.argv[2], int(sys.argv[3]), sys.argv[4],
                 sys.argv[5] if len(sys.argv) > 5 else "")
    else:
        main(sys.argv[1:])

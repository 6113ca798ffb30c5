"""collie_torch.ElasticGroup under collie launch (runtime/examples/torch/elastic.py):
4 ranks train, rank 1 is killed in the middle of step 5's all_reduce, the 3
others recover in the same processes (no process restarted), a replacement
joins at their next expand() and receives the weights and the step, and all
4 end with the weights of the same training in one process.

    elastic_test.py COLLIE EXAMPLE   (the collie binary, elastic.py)
"""

import os
import re
import subprocess
import sys


def main():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: python3-torch is not installed")
        return 77
    collie, example = sys.argv[1], sys.argv[2]
    # The survivors wait for the replacement (ELASTIC_MIN_RANKS): a machine
    # busy with other tests may start it after they would have finished.
    # 256 features, not the example's 512: an all_reduce of 514 KiB, an eighth of
    # the reference BLAS's work (what this test checks is the recovery).
    env = dict(os.environ, ELASTIC_KILL="1:5", ELASTIC_STEPS="30", ELASTIC_MIN_RANKS="4",
               ELASTIC_FEATURES="256",
               COLLIE_LOG_LEVEL="warn")
    run = subprocess.run([collie, "launch", "-n", "4", "--keep-going", "--max-restarts", "1",
                          "--", sys.executable, example],
                         env=env, capture_output=True, text=True, timeout=400)
    out, err = run.stdout, run.stderr
    print(out)
    print(err, file=sys.stderr)
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    check(run.returncode == 0, f"collie launch exited {run.returncode}")
    check("[rank 1] rank 1: dying" in out, "rank 1 did not die as told")
    # The survivors: their step failed naming rank 1, and they recovered
    # with 3 ranks, in the same processes (original ranks 0, 2, 3).
    for r in (0, 2, 3):
        check(re.search(rf"^\[rank {r}\] rank {r}: step \d+ failed .*rank 1 at", out, re.M),
              f"rank {r}'s step did not fail naming rank 1")
        check(re.search(rf"^\[rank {r}\] rank \d: recovered with 3 ranks at step \d+", out, re.M),
              f"rank {r} did not recover with 3 ranks")
        check(re.search(rf"^\[rank {r}\] rank \d: done 30 steps on 4 ranks, weights match the "
                        r"single-process run$", out, re.M),
              f"rank {r} did not finish on 4 ranks with the right weights")
    # The replacement: joined with the members' step, and finished alike.
    joined = re.search(r"^\[rank 1 replacement\] rank 3 \(newcomer\): joined at step (\d+) of 4",
                       out, re.M)
    check(joined and int(joined.group(1)) >= 5, "the replacement did not join as rank 3 of 4")
    check(re.search(r"^\[rank 1 replacement\] rank 3 \(newcomer\): done 30 steps on 4 ranks, "
                    r"weights match the single-process run$", out, re.M),
          "the replacement did not finish with the right weights")
    check("in place of rank 1 (restart 1 of --max-restarts 1)" in err,
          "the launcher did not say it started a replacement")
    check("rank 1 lost (--keep-going); 4 of the node's 5 processes exited 0" in err,
          "the launcher's summary of the lost rank")
    check(re.search(r"rank 1: pid \d+ replaced pid \d+, and exit code 0", err),
          "the launcher did not say who replaced whom")
    # No process but the victim's was started twice: 5 processes in all.
    check(err.count("failed: killed by SIGKILL") == 1, "another process died")
    for f in failures:
        print("FAILED:", f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

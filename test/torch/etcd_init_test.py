"""torch.distributed's etcd:// init method (collie_torch/etcd.py): 3 ranks
started by hand meet in a real etcd (one member on loopback, TLS with
certificates made by openssl), and every collective they run has the right
result; without a certificate, init is refused naming the variables.
Exits 77 (skipped, saying why) where torch, etcd or openssl is missing.

    python3 etcd_init_test.py            # the test
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

WORLD = 3


def rank_main(url, rank):
    import torch
    import torch.distributed as dist
    import collie_torch  # noqa: F401  (registers "collie" and etcd://)
    dist.init_process_group("collie", init_method=url, rank=rank, world_size=WORLD)
    assert dist.get_rank() == rank and dist.get_world_size() == WORLD
    t = torch.arange(5, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(t)
    want = torch.arange(5, dtype=torch.float64) * (WORLD * (WORLD + 1) // 2)
    assert torch.equal(t, want), (t, want)
    b = torch.full((3,), float(rank))
    dist.broadcast(b, src=1)
    assert torch.equal(b, torch.full((3,), 1.0)), b
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(WORLD)]
    dist.all_gather(gathered, torch.tensor([rank, rank * 10]))
    assert [g.tolist() for g in gathered] == [[r, r * 10] for r in range(WORLD)], gathered
    dist.barrier()
    print("rank %d: ok" % rank, flush=True)
    dist.destroy_process_group()


def refused_main(url):
    import torch.distributed as dist
    import collie_torch  # noqa: F401
    try:
        dist.init_process_group("collie", init_method=url, rank=0, world_size=1)
    except Exception as e:  # noqa: BLE001
        print("refused: %s" % e, flush=True)
        return
    print("not refused", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def certificates(d):
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    with open(os.path.join(d, "client.ext"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    for k in ("ca", "server", "client"):
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
                "-out", k + "-key.pem")
    openssl("req", "-x509", "-new", "-key", "ca-key.pem", "-days", "2", "-subj", "/CN=ca",
            "-out", "ca.pem")
    for k in ("server", "client"):
        openssl("req", "-new", "-key", k + "-key.pem", "-subj", "/CN=" + k, "-out", k + ".csr")
        openssl("x509", "-req", "-in", k + ".csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
                "-CAcreateserial", "-days", "2", "-extfile", k + ".ext", "-out", k + ".pem")


def start_etcd(d):
    """One member; its port was free a moment ago (etcd 3.4's JSON gateway
    cannot take port 0): started again on another if it was taken."""
    for _ in range(5):
        port = free_port()
        log = open(os.path.join(d, "etcd.log"), "w")
        url = "https://127.0.0.1:%d" % port
        etcd = subprocess.Popen(
            ["etcd", "--name", "m0", "--data-dir", os.path.join(d, "data-%d" % port),
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", "http://127.0.0.1:0",
             "--initial-advertise-peer-urls", "http://127.0.0.1:0",
             "--initial-cluster", "m0=http://127.0.0.1:0", "--client-cert-auth",
             "--trusted-ca-file", os.path.join(d, "ca.pem"),
             "--cert-file", os.path.join(d, "server.pem"),
             "--key-file", os.path.join(d, "server-key.pem")],
            stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = open(os.path.join(d, "etcd.log")).read()
            if "ready to serve client requests" in text:
                return etcd, port
            if "address already in use" in text or etcd.poll() is not None:
                break
            time.sleep(0.05)
        etcd.kill()
        etcd.wait()
    raise RuntimeError("etcd did not start: " + open(os.path.join(d, "etcd.log")).read()[-2000:])


def main():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: python3-torch is not installed")
        return 77
    for tool in ("etcd", "openssl"):
        if shutil.which(tool) is None:
            print("SKIP: %s is not installed (tools/setup.sh --test installs it)" % tool)
            return 77
    d = tempfile.mkdtemp(prefix="collie-etcd-torch-")
    etcd = None
    try:
        certificates(d)
        etcd, port = start_etcd(d)
        url = "etcd://127.0.0.1:%d/torch-%d" % (port, os.getpid())
        env = dict(os.environ, COLLIE_ETCD_CACERT=os.path.join(d, "ca.pem"),
                   COLLIE_ETCD_CERT=os.path.join(d, "client.pem"),
                   COLLIE_ETCD_KEY=os.path.join(d, "client-key.pem"), COLLIE_ETCD_INSECURE="0")
        ranks = [subprocess.Popen([sys.executable, __file__, "rank", url, str(r)], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(WORLD)]
        failed = False
        for r, p in enumerate(ranks):
            out, _ = p.communicate(timeout=240)
            if p.returncode != 0 or ("rank %d: ok" % r) not in out:
                print("rank %d failed (exit %d):\n%s" % (r, p.returncode, out))
                failed = True
        bare = dict(os.environ, COLLIE_ETCD_CERT="", COLLIE_ETCD_KEY="", COLLIE_ETCD_INSECURE="0")
        out = subprocess.run([sys.executable, __file__, "refused", url + "-bare"], env=bare,
                             capture_output=True, text=True, timeout=120).stdout
        if "refused:" not in out or "COLLIE_ETCD_CERT" not in out:
            print("init without a certificate was not refused as it should be:\n" + out)
            failed = True
        if failed:
            return 1
        print("etcd:// init: %d ranks ran all_reduce, broadcast, all_gather and barrier, checked; a rank without a "
              "certificate was refused" % WORLD)
        return 0
    finally:
        if etcd is not None:
            etcd.kill()
            etcd.wait()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        rank_main(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "refused":
        refused_main(sys.argv[2])
    else:
        sys.exit(main())

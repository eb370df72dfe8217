"""Two hosts made as network namespaces on this machine, one rank in each.

The test creates the namespaces, a veth pair between them and private
addresses of its own, runs a DDP rank inside each (rendezvous over TCP at the
first host's address; Gloo bound to the veth), checks the parameters equal one
process training on the whole batch, and removes the namespaces. Each
namespace holds only its loopback and its end of the pair: no traffic can
leave for any other address. It needs root (CI has it); without it, it fails
with a clear message rather than skip.
"""
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SUBNET = "10.213.77"  # the test's own private addresses
PORT = 29613


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0:
        pytest.fail("the two-host test makes network namespaces (ip netns add) and needs root; "
                    "run it as root (CI does)")
    tag = f"{os.getpid() % 100000}"
    hosts = [(f"omtia{tag}a", f"om{tag}a", f"{SUBNET}.1"), (f"omtia{tag}b", f"om{tag}b", f"{SUBNET}.2")]
    try:
        for ns, _, _ in hosts:
            ip("netns", "add", ns)
        ip("link", "add", hosts[0][1], "type", "veth", "peer", "name", hosts[1][1])
        for ns, dev, addr in hosts:
            ip("link", "set", dev, "netns", ns)
            ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield hosts
    finally:
        for ns, _, _ in hosts:
            ip("netns", "del", ns, check=False)  # takes its end of the veth pair with it


def test_ddp_across_two_network_namespaces(two_hosts):
    for ns, dev, addr in two_hosts:
        links = ip("-n", ns, "-o", "link", "show").stdout
        assert sorted(l.split(":")[1].strip().split("@")[0] for l in links.splitlines()) == sorted(["lo", dev])
        routes = ip("-n", ns, "route", "show").stdout.strip().splitlines()
        assert routes and all(r.startswith(f"{SUBNET}.0/24 dev {dev}") for r in routes), routes
    master = two_hosts[0][2]
    run_in_namespaces(two_hosts, lambda rank: f"import dist_workers; dist_workers.ddp({rank}, 2, {PORT}, 'plain', "
                                              f"addr={master!r})", "the two-host DDP run")


def run_in_namespaces(two_hosts, code_of_rank, what, timeout=180):
    """Runs code_of_rank(rank) (Python, with tests/ on its path) as that rank
    inside its namespace, Gloo bound to the namespace's end of the pair;
    fails unless every rank exits 0 having finished it."""
    procs = []
    for rank, (ns, dev, addr) in enumerate(two_hosts):
        env = dict(os.environ, GLOO_SOCKET_IFNAME=dev, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
        code = f"{code_of_rank(rank)}; print('rank {rank} ok')"
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + timeout
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"{what} did not finish within {timeout} s")
        outputs.append(out)
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0 and f"rank {rank} ok" in out, f"rank {rank}:\n{out[-4000:]}"

"""Real Redis deployments beyond one server, on loopback, for tests: a Redis
Cluster (three masters, three replicas) and a Sentinel set (a master, a replica,
three sentinels). Every process is a real redis-server on free ports in a temp
directory, nothing persisted, torn down by `stop()`; failovers are the real
thing (`CLUSTER FAILOVER`, `SENTINEL FAILOVER`, or a master killed with SIGKILL).

Timeouts are short so a failover takes seconds, not the production defaults'
tens of seconds: a node counts as failed after 1 s without an answer.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from processes import Child, free_port, redis_ping, redis_server_argv

NODE_TIMEOUT_MS = 1000
SERVICE = "mymaster"
# How long a deployment may take to start or settle on a loaded 2-core machine.
SETTLE_S = 60.0
# A manual cluster failover not done by then has been given up by Redis (its CLUSTER_MF_TIMEOUT, 5 s).
MANUAL_FAILOVER_S = 6.0


def require_redis_cli() -> None:
    """The deployments are built and driven with redis-cli; without it nothing here runs."""
    if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
        raise RuntimeError("redis-server and redis-cli are needed (Debian/Ubuntu: apt-get install redis-server)")


def cli(port: int, *args: str, password: str | None = None) -> str:
    """One redis-cli command against 127.0.0.1:`port`; its output, stripped."""
    auth = ["-a", password, "--no-auth-warning"] if password else []
    done = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *auth, *args], capture_output=True, text=True, timeout=10
    )
    return done.stdout.strip()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = SETTLE_S) -> float:
    """Poll `condition` every 50 ms; seconds it took, or AssertionError naming `what`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(0.05)
    return time.monotonic() - start


def info(port: int, section: str, password: str | None = None) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in cli(port, "INFO", section, password=password).splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


def role(port: int) -> str:
    """ "master", "slave" (a replica), "sentinel", or "" when it does not answer."""
    return cli(port, "ROLE").split("\n", 1)[0]


@dataclass
class Server:
    port: int
    child: Child

    def kill(self) -> None:
        """SIGKILL: the crash a failover is for."""
        self.child.kill()

    def alive(self) -> bool:
        return self.child.poll() is None


def _redis_server(tmp: Path, name: str, port: int, *flags: str) -> Server:
    """One node (the throwaway recipe of processes/redis.py plus `flags`), answering PING."""
    work = tmp / name
    work.mkdir(parents=True, exist_ok=True)
    # A replica's first sync starts at once (the default waits 5 s for more replicas to share it).
    argv = [*redis_server_argv(port, work), "--repl-diskless-sync-delay", "0", *flags]
    child = Child(argv, work / "log", cwd=work)
    child.wait_ready(redis_ping(port), timeout_s=SETTLE_S)
    return Server(port, child)


class _Deployment:
    """Redis processes on loopback in `tmp`, started together, stopped together."""

    def __init__(self, tmp: Path) -> None:
        require_redis_cli()
        self.tmp = tmp
        self.servers: dict[int, Server] = {}

    def start(self, create: Callable[[], None]) -> None:
        """`create` the processes and wait until the deployment settles; on any
        failure (a Ctrl-C included) stop whatever had started, then re-raise."""
        try:
            create()
            self.wait_settled()
        except BaseException:
            self.stop()
            raise

    def wait_settled(self) -> float:
        raise NotImplementedError

    def stop(self) -> None:
        for server in self.servers.values():
            server.child.terminate()
        for server in self.servers.values():
            server.child.stop()


class ClusterDeployment(_Deployment):
    """Three masters and three replicas, `redis-cli --cluster create`d."""

    def __init__(self, tmp: Path, masters: int = 3) -> None:
        super().__init__(tmp)
        self.start(lambda: self._create(masters))

    def _create(self, masters: int) -> None:
        for i in range(masters * 2):
            port, bus = free_port(), free_port()
            flags = [
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                str(bus),
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
                # A replica may take over however long it was cut off: tests kill masters on purpose.
                "--cluster-replica-validity-factor",
                "0",
            ]
            self.servers[port] = _redis_server(self.tmp, f"node-{i}-{port}", port, *flags)
        nodes = [f"127.0.0.1:{p}" for p in self.servers]
        done = subprocess.run(
            ["redis-cli", "--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=SETTLE_S,
        )
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")

    @property
    def startup_nodes(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.servers]

    def live(self) -> list[int]:
        return [p for p, s in self.servers.items() if s.alive()]

    def nodes(self) -> list[dict[str, str]]:
        """CLUSTER NODES as seen by a live node: port, role flags, master id, slots."""
        rows = []
        for line in cli(self.live()[0], "CLUSTER", "NODES").splitlines():
            parts = line.split()
            rows.append(
                {
                    "id": parts[0],
                    "port": parts[1].split("@")[0].rsplit(":", 1)[1],
                    "flags": parts[2],
                    "master": parts[3],
                    "slots": " ".join(parts[8:]),
                }
            )
        return rows

    def masters(self) -> list[int]:
        return [int(n["port"]) for n in self.nodes() if "master" in n["flags"] and "fail" not in n["flags"]]

    def replica_of(self, master_port: int) -> int:
        rows = self.nodes()
        master_id = next(n["id"] for n in rows if int(n["port"]) == master_port)
        return next(int(n["port"]) for n in rows if n["master"] == master_id and "fail" not in n["flags"])

    def keyslot(self, key: str) -> int:
        return int(cli(self.live()[0], "CLUSTER", "KEYSLOT", key))

    def master_of(self, key: str) -> int:
        """The port of the master serving `key`'s slot now."""
        slot = self.keyslot(key)
        for n in self.nodes():
            if "master" not in n["flags"] or "fail" in n["flags"]:
                continue
            for span in n["slots"].split():
                if span.startswith("["):
                    continue  # a slot being migrated
                low, _, high = span.partition("-")
                if int(low) <= slot <= int(high or low):
                    return int(n["port"])
        raise AssertionError(f"no master serves slot {slot}")

    def settled(self) -> bool:
        """Every live node says the cluster is ok, and every live replica is in sync."""
        for port in self.live():
            if info(port, "cluster").get("cluster_enabled") != "1":
                return False
            if "cluster_state:ok" not in cli(port, "CLUSTER", "INFO"):
                return False
            repl = info(port, "replication")
            if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                return False
        return len(self.masters()) == len(self.servers) // 2

    def wait_settled(self) -> float:
        return wait_until(self.settled, "the cluster to be ok with every replica in sync")

    def failover(self, replica_port: int) -> float:
        """A manual failover (`CLUSTER FAILOVER` on the replica): coordinated, nothing lost.
        Redis gives one up unfinished after 5 s (a loaded machine's late master): asked again then."""
        asked = [-MANUAL_FAILOVER_S]

        def taken_over() -> bool:
            if role(replica_port) == "master":
                return True
            if time.monotonic() - asked[0] > MANUAL_FAILOVER_S:
                assert cli(replica_port, "CLUSTER", "FAILOVER") == "OK"
                asked[0] = time.monotonic()
            return False

        took = wait_until(taken_over, f"replica {replica_port} to take over")
        self.wait_settled()
        return took

    def kill(self, port: int) -> None:
        self.servers[port].kill()

    def wait_promoted(self, replica_port: int) -> float:
        return wait_until(lambda: role(replica_port) == "master", f"replica {replica_port} to be promoted")


class SentinelDeployment(_Deployment):
    """A master, one replica and three sentinels monitoring it as `mymaster` (quorum 2)."""

    def __init__(self, tmp: Path, sentinels: int = 3) -> None:
        super().__init__(tmp)
        self.sentinel_ports: list[int] = []
        self.start(lambda: self._create(sentinels))

    def _create(self, sentinels: int) -> None:
        master = free_port()
        self.servers[master] = _redis_server(self.tmp, f"master-{master}", master)
        replica = free_port()
        replica_of = ("--replicaof", "127.0.0.1", str(master))
        self.servers[replica] = _redis_server(self.tmp, f"replica-{replica}", replica, *replica_of)
        wait_until(lambda: info(replica, "replication").get("master_link_status") == "up", "the replica to sync")
        for i in range(sentinels):
            port = free_port()
            work = self.tmp / f"sentinel-{i}-{port}"
            work.mkdir(parents=True, exist_ok=True)
            conf = work / "sentinel.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {work}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {master} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {NODE_TIMEOUT_MS}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            child = Child(["redis-server", str(conf), "--sentinel"], work / "log", cwd=work)
            child.wait_ready(redis_ping(port), timeout_s=SETTLE_S)
            self.servers[port] = Server(port, child)
            self.sentinel_ports.append(port)

    @property
    def sentinels(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.sentinel_ports]

    def named_master(self) -> int | None:
        """The master's port as every live sentinel names it; None while they disagree."""
        answers = {cli(p, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE) for p in self.live_sentinels()}
        if len(answers) != 1:
            return None
        return int(answers.pop().split()[-1])

    def master(self) -> int:
        port = self.named_master()
        assert port is not None, "the sentinels disagree on the master"
        return port

    def _promoted_from(self, old: int) -> bool:
        port = self.named_master()
        return port is not None and port != old and role(port) == "master"

    def live_sentinels(self) -> list[int]:
        return [p for p in self.sentinel_ports if self.servers[p].alive()]

    def data_ports(self) -> list[int]:
        return [p for p in self.servers if p not in self.sentinel_ports]

    def settled(self) -> bool:
        """Each sentinel knows the others, the master, and a replica in sync."""
        others = len(self.sentinel_ports) - 1
        master = self.named_master()
        if master is None or role(master) != "master":
            return False
        for p in self.live_sentinels():
            state = dict(_pairs(cli(p, "SENTINEL", "MASTER", SERVICE).splitlines()))
            if int(state.get("num-other-sentinels", -1)) < others or int(state.get("num-slaves", 0)) < 1:
                return False
            if "s_down" in state.get("flags", "") or "failover" in state.get("flags", ""):
                return False
        replicas = [p for p in self.data_ports() if p != master and self.servers[p].alive()]
        return all(info(p, "replication").get("master_link_status") == "up" for p in replicas)

    def wait_settled(self) -> float:
        return wait_until(self.settled, "the sentinels to agree on a master with a replica in sync")

    def failover(self) -> int:
        """`SENTINEL FAILOVER`: the replica is promoted and the old master demoted; the new master's port."""
        old = self.master()
        # Refused (NOGOODSLAVE) while the sentinel has not yet judged the replica fit to
        # promote (a loaded machine's late INFO): asked again until it takes it.
        wait_until(lambda: self._start_failover() in ("OK", "INPROG"), "a sentinel to start the failover")
        wait_until(lambda: self._promoted_from(old), "the sentinels to fail over")
        return self.master()

    def _start_failover(self) -> str:
        """SENTINEL FAILOVER's answer: OK, or the error's code (INPROG: one is under way)."""
        return cli(self.sentinel_ports[0], "SENTINEL", "FAILOVER", SERVICE).split(" ", 1)[0]

    def kill_master(self) -> int:
        """SIGKILL the master; returns its port (the sentinels fail over after NODE_TIMEOUT_MS)."""
        old = self.master()
        self.servers[old].kill()
        return old

    def wait_new_master(self, old: int) -> int:
        wait_until(lambda: self._promoted_from(old), "the sentinels to promote")
        return self.master()


def _pairs(lines: list[str]) -> list[tuple[str, str]]:
    """redis-cli prints a flat map as alternating key and value lines."""
    return list(zip(lines[0::2], lines[1::2]))

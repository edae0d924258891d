"""A Ray cluster of several nodes on this one machine, all on the loopback: the stand-in for a cluster of machines
that the GPU check uses (scripts/gpu/check_devices.py: one node per GPU) and the cluster tests use
(tests/actions/test_cluster.py: one node per build folder). Each node is its own raylet with its own environment,
as each machine of a real cluster has its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# Ray's addresses for this machine: the loopback, never the machine's network address. A process that joins the
# cluster needs it in its environment before it imports Ray.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


@contextmanager
def local_cluster(node_envs: list[dict[str, str]], num_cpus: int, num_gpus: int) -> Iterator[tuple[Any, list[Any]]]:
    """One node per entry of ``node_envs``, each with ``num_cpus`` and ``num_gpus``, on 127.0.0.1; yields (the
    ``ray.cluster_utils.Cluster``, its nodes). A node's environment is set in this process while the node starts
    (its raylet and workers inherit it: Ray reads ``CUDA_VISIBLE_DEVICES`` there) and given to Ray as the node's
    ``env_vars``. This process's environment is as it was afterwards, but for ``LOOPBACK_ENV`` while the cluster
    runs."""
    names = {name for env in node_envs for name in env} | set(LOOPBACK_ENV)
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update(LOOPBACK_ENV)
    from ray.cluster_utils import Cluster

    cluster = None
    nodes: list[Any] = []
    try:
        for env in node_envs:
            node = {"node_ip_address": "127.0.0.1", "num_cpus": num_cpus, "num_gpus": num_gpus, "env_vars": env}
            os.environ.update(env)
            if cluster is None:
                cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
                nodes.append(cluster.head_node)
            else:
                nodes.append(cluster.add_node(**node))
        _restore({name: value for name, value in saved.items() if name not in LOOPBACK_ENV})
        if cluster is None:
            raise ValueError("a local cluster needs at least one node")
        cluster.wait_for_nodes()
        yield cluster, nodes
    finally:
        if cluster is not None:
            cluster.shutdown()
        _restore(saved)


def _restore(saved: dict[str, str | None]) -> None:
    """Put environment variables back as ``saved`` holds them (None: unset)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

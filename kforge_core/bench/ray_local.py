"""A Ray cluster of several nodes on this one machine, for the tests and the bench scripts (never for users: they
join real nodes with `ray start`). Each node is its own raylet with its own logical resources (e.g. GPUs that do
not exist, to check placement), all under a private temporary directory, and everything is stopped on exit."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

MB = 1024 * 1024


@contextlib.contextmanager
def local_cluster(nodes: list[dict], *, object_store_mb: int = 100) -> Iterator:
    """Yield a started `ray.cluster_utils.Cluster`: a head that runs no tasks (0 CPUs: the driver's mailbox
    actor needs none) and one node per entry of `nodes` (ray.init node arguments such as num_cpus, num_gpus,
    resources); `cluster.node_defaults` holds what every node was given. Object stores are kept small: a bench
    moves only events and records through them."""
    from ray.cluster_utils import Cluster

    # short: Ray's socket paths live under it and a Unix socket path holds at most 107 bytes
    temp_dir = tempfile.mkdtemp(prefix="kfray-", dir="/tmp")
    # the head still records its address in Ray's default directory, which a fresh machine lacks (a device run
    # failed with FileNotFoundError: /tmp/ray/ray_current_cluster)
    os.makedirs(os.path.join(os.environ.get("RAY_TMPDIR", "/tmp"), "ray"), exist_ok=True)
    common = {"object_store_memory": object_store_mb * MB, "temp_dir": temp_dir}
    cluster = None
    try:  # an interruption while the head starts leaves nothing behind either
        cluster = Cluster(initialize_head=True,
                          head_node_args={**common, "num_cpus": 0, "num_gpus": 0, "include_dashboard": False})
        cluster.node_defaults = common  # for adding a node later with the same settings
        for args in nodes:
            cluster.add_node(**common, **args)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)

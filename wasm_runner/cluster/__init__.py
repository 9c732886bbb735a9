"""Batch runs spread over a Ray cluster (the optional `ray` extra: `pip install wasm-runner[ray]`).

`Runner.run_many(requests, cluster=RayCluster(...))` sends the items to one actor per node of
the cluster, each holding a Runner whose lanes run on that node's cores; results come back in
completion order, with the same guarantees as on one machine (see `dispatch`).
"""

from wasm_runner.cluster.settings import ClusterUnavailableError, RayCluster

__all__ = ["ClusterUnavailableError", "RayCluster"]

"""`etdeploy explore RESULT`: the program's graph in Google's Model Explorer, with
etdeploy's findings on its nodes.

    extra.py     the optional `explore` extra: present, or a one-line error
    graph.py     the ETRecord's graph as Model Explorer's ETRecord adapter shows it,
                 and which exported-program nodes each debug handle came from
    overlays.py  the result's localization (per-node error vs eager) and the
                 profile's ETDump (per-node device time) as node data
    server.py    Model Explorer's server on a loopback port, with the graph and the
                 node data in its URL

The graph is ExecuTorch's Model Explorer extension's (executorch-extension-model-
explorer: its ETRecord adapter; its .pte adapter when the build kept no ETRecord);
etdeploy adds node data, Model Explorer's format for per-node values (a value per
node id, colours by threshold), which its UI overlays on the graph.
"""

from __future__ import annotations

from etdeploy.explore.extra import require_explore_extra
from etdeploy.explore.overlays import Exploration, NodeValue, Overlay, plan_exploration

__all__ = [
    "Exploration",
    "NodeValue",
    "Overlay",
    "plan_exploration",
    "require_explore_extra",
]

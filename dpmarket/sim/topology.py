"""The network's shape as a graph: the learner, its channels, and the owners on each channel."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np

# Beyond this many owners the picture shows channels with their owner counts, not every owner.
DRAW_EACH_OWNER_UP_TO = 120


def build(names: list[str], channel_of: list[int], rates: list[float], epsilons: list[float],
          sizes: list[int], channels: int) -> nx.Graph:
    """Learner — channel — owner graph, with each owner's records, ε and clock rate as attributes."""
    graph = nx.Graph()
    graph.add_node("learner", kind="learner")
    for c in range(channels):
        graph.add_node(f"channel-{c}", kind="channel")
        graph.add_edge("learner", f"channel-{c}")
    for i, name in enumerate(names):
        graph.add_node(name, kind="owner", index=i, records=int(sizes[i]),
                       epsilon=float(epsilons[i]), clock_rate=float(rates[i]))
        graph.add_edge(f"channel-{int(channel_of[i])}", name)
    return graph


def _radial_layout(graph: nx.Graph) -> dict:
    """Learner at the centre, channels on a ring, each channel's owners on a ring around it.

    Computed directly (no force-directed optimisation): instant for thousands of nodes and
    the same picture every time.
    """
    channels = [n for n, d in graph.nodes(data=True) if d["kind"] == "channel"]
    pos = {"learner": np.zeros(2)}
    ring = 0.0 if len(channels) == 1 else 1.0
    for c, name in enumerate(channels):
        angle = 2 * np.pi * c / len(channels)
        centre = ring * np.array([np.cos(angle), np.sin(angle)]) - (0 if ring else np.array([0, 1.3]))
        pos[name] = centre
        owners = [n for n in graph.neighbors(name) if n != "learner"]
        radius = 0.35 if ring else 0.8
        for j, owner in enumerate(owners):
            a = 2 * np.pi * j / max(len(owners), 1)
            pos[owner] = centre + radius * np.array([np.cos(a), np.sin(a)])
    return pos


def save(graph: nx.Graph, path: Path) -> None:
    """Write the graph as GraphML (readable by networkx, Gephi, yEd)."""
    nx.write_graphml(graph, path)


def draw(graph: nx.Graph, path: Path) -> None:
    """Draw the topology: every owner when there are few, channels with counts otherwise.

    Plain matplotlib (one LineCollection, one scatter per kind): networkx's drawing helpers
    cost several times more for the same picture.
    """
    from matplotlib.collections import LineCollection  # deferred: slow to import
    from matplotlib.figure import Figure

    owners = [n for n, d in graph.nodes(data=True) if d["kind"] == "owner"]
    shown = graph
    if len(owners) > DRAW_EACH_OWNER_UP_TO:
        # a copy, not graph.subgraph: a subgraph view lists its nodes in set (hash) order,
        # which moved the channels around between runs of the same scenario
        shown = graph.copy()
        shown.remove_nodes_from(owners)
    pos, kinds = _radial_layout(shown), nx.get_node_attributes(shown, "kind")
    fig = Figure(figsize=(6.4, 6.0))
    ax = fig.subplots()
    ax.add_collection(LineCollection([(pos[a], pos[b]) for a, b in shown.edges()], colors="0.6",
                                     linewidths=0.5))
    style = {"owner": (18, "0.3"), "channel": (160, "tab:blue"), "learner": (300, "tab:red")}
    for kind, (size, colour) in style.items():
        xy = np.array([pos[n] for n in shown if kinds[n] == kind]).reshape(-1, 2)
        ax.scatter(xy[:, 0], xy[:, 1], s=size, c=colour, zorder=2)
    for n in shown:
        if kinds[n] != "owner":
            label = n if kinds[n] == "learner" else f"{n}\n({graph.degree(n) - 1} owners)"
            ax.annotate(label, pos[n], ha="center", va="center", fontsize=7, zorder=3)
    channels = sum(1 for kind in kinds.values() if kind == "channel")
    plural = "channel" if channels == 1 else "channels"
    ax.set_title(f"topology: learner, {channels} {plural}, {len(owners)} owners", fontsize=10)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.savefig(path, dpi=100, metadata={"Software": None})

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


LABEL_OWNERS_UP_TO = 30  # owner names drawn beside their dots up to this many owners


def draw(graph: nx.Graph, path: Path, load: dict | None = None) -> None:
    """Draw the network with what went through it: every owner when there are few (dot area by
    records, shade by exchanges, names up to LABEL_OWNERS_UP_TO owners), channels only otherwise;
    below, each channel's owners, utilisation and collisions.

    ``load`` (from the finished run): ``exchanges`` and ``collisions`` per owner index,
    ``utilisation``, ``collided`` and ``transmissions`` per channel; None draws the shape alone.
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
    fig = Figure(figsize=(7.0, 6.4))
    fig.subplots_adjust(left=0.02, right=0.9, bottom=0.12, top=0.9)
    ax = fig.subplots()
    ax.add_collection(LineCollection([(pos[a], pos[b]) for a, b in shown.edges()], colors="0.75",
                                     linewidths=0.5, zorder=1))
    if shown is graph:
        _draw_owners(fig, ax, graph, owners, pos, load)
    for kind, (size, colour) in {"channel": (160, "tab:blue"), "learner": (300, "tab:red")}.items():
        xy = np.array([pos[n] for n in shown if kinds[n] == kind]).reshape(-1, 2)
        ax.scatter(xy[:, 0], xy[:, 1], s=size, c=colour, zorder=2)
    channels = [n for n in shown if kinds[n] == "channel"]
    for n in channels:  # the channel's number on its dot; its load in the list below
        ax.annotate(n.split("-")[1], pos[n], ha="center", va="center", fontsize=7, color="white", zorder=4)
    ax.annotate("learner", pos["learner"], xytext=(0, 10), textcoords="offset points", ha="center",
                fontsize=8, zorder=4)
    fig.suptitle(_title(graph, owners, shown is graph, load), fontsize=9)
    fig.text(0.02, 0.02, _channel_lines(graph, channels, load), fontsize=7, va="bottom", family="monospace")
    ax.set_aspect("equal")
    ax.margins(0.12)
    ax.axis("off")
    fig.savefig(path, dpi=100, metadata={"Software": None})


def _draw_owners(fig, ax, graph: nx.Graph, owners: list, pos: dict, load: dict | None) -> None:
    """Owners as dots: area by records, shade by exchanges (with a colour bar), names if few."""
    records = np.array([graph.nodes[n]["records"] for n in owners], dtype=float)
    area = 10 + 70 * np.sqrt(records / records.max())
    xy = np.array([pos[n] for n in owners]).reshape(-1, 2)
    if load is None:
        ax.scatter(xy[:, 0], xy[:, 1], s=area, c="0.3", zorder=3)
    else:
        exchanges = [load["exchanges"][graph.nodes[n]["index"]] for n in owners]
        dots = ax.scatter(xy[:, 0], xy[:, 1], s=area, c=exchanges, cmap="viridis", zorder=3,
                          edgecolors="0.2", linewidths=0.3)
        fig.colorbar(dots, ax=ax, shrink=0.6, pad=0.01, label="exchanges per owner")
    if len(owners) <= LABEL_OWNERS_UP_TO:
        for name in owners:
            channel = next(n for n in graph.neighbors(name) if graph.nodes[n]["kind"] == "channel")
            away = pos[name] - np.asarray(pos[channel])
            ax.annotate(name, pos[name], xytext=8 * away / (np.linalg.norm(away) or 1.0),
                        textcoords="offset points", ha="left" if away[0] >= 0 else "right",
                        va="center", fontsize=7, zorder=4)


MAX_CHANNEL_LINES = 8


def _channel_lines(graph: nx.Graph, channels: list[str], load: dict | None) -> str:
    """One line per channel (at most MAX_CHANNEL_LINES): its owners and, after a run, its
    utilisation and collided transmissions."""
    lines = []
    for name in channels[:MAX_CHANNEL_LINES]:
        c = int(name.split("-")[1])
        text = f"channel {c}: {graph.degree(name) - 1} owners"
        if load is not None:
            text += (f", use {load['utilisation'][c]:.1%}, {load['collided'][c]} of "
                     f"{load['transmissions'][c]} transmissions collided")
        lines.append(text)
    if len(channels) > MAX_CHANNEL_LINES:
        lines.append(f"… and {len(channels) - MAX_CHANNEL_LINES} more channels (channels.csv)")
    return "\n".join(lines)


def _title(graph: nx.Graph, owners: list, each: bool, load: dict | None) -> str:
    channels = sum(1 for _, d in graph.nodes(data=True) if d["kind"] == "channel")
    text = f"network: learner, {channels} channel{'s' if channels > 1 else ''}, {len(owners)} owners"
    if each:
        text += "\nblue: channels; dot area: records" + ("; colour: exchanges" if load is not None else "")
    return text

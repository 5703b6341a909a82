"""The network's shape as a graph: the learner, its channels, and the owners on each channel."""

from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np

# Beyond this many owners the picture shows channels with their owner counts, not every owner.
DRAW_EACH_OWNER_UP_TO = 120


def build(names: list[str], channel_of: list[int], rates: list[float], epsilons: list[float],
          sizes: list[int], *, channels: int) -> nx.Graph:
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
GROUPS_PER_CHANNEL = 12  # beyond DRAW_EACH_OWNER_UP_TO owners, a channel's owners in this many groups…
GROUPS = 24  # …and all channels' in at most this many (but at least 3 a channel)


def draw(graph: nx.Graph, path: Path, load: dict | None = None) -> None:
    """Draw the network with what went through it: every owner when there are few (dot area by
    records, colour by exchanges, names up to LABEL_OWNERS_UP_TO owners), and beyond
    DRAW_EACH_OWNER_UP_TO owners each channel's owners in at most GROUPS_PER_CHANNEL groups of
    consecutive owners (dot area: the group's records; colour: its exchanges; label: which owners),
    so that 1,000 or 10,000 owners stay readable; below, each channel's owners, utilisation and
    collisions. Counts get a whole-number colour bar, under the drawing, where it covers no name.

    ``load`` (from the finished run): ``exchanges`` and ``collisions`` per owner index,
    ``utilisation``, ``collided`` and ``transmissions`` per channel; None draws the shape alone.
    Plain matplotlib (one LineCollection, one scatter per kind): networkx's drawing helpers
    cost several times more for the same picture.
    """
    from matplotlib.collections import LineCollection  # deferred: slow to import
    from matplotlib.figure import Figure

    from dpmarket.output.figures.axes import keep_texts_inside

    owners = [n for n, d in graph.nodes(data=True) if d["kind"] == "owner"]
    shown = graph if len(owners) <= DRAW_EACH_OWNER_UP_TO else grouped(graph, load)
    pos, kinds = _radial_layout(shown), nx.get_node_attributes(shown, "kind")
    channels = [n for n, d in shown.nodes(data=True) if d["kind"] == "channel"]
    listing = _channel_lines(graph, channels, load)
    # From the bottom, in inches: the channels' lines, the colour bar with its label, the drawing.
    text_height = (listing.count("\n") + 1) * 7 * 1.35 / 72 + 0.1
    bar_y = text_height + 0.45
    height = 7.0
    fig = Figure(figsize=(7.0, height))
    fig.subplots_adjust(left=0.02, right=0.98, bottom=(bar_y + 0.35) / height, top=0.9)
    ax = fig.subplots()
    ax.add_collection(LineCollection([(pos[a], pos[b]) for a, b in shown.edges()], colors="0.75",
                                     linewidths=0.5, zorder=1))
    members = [n for n in shown if kinds[n] in ("owner", "group")]
    labels = _draw_owners(fig, ax, shown, members, pos, load=load, bar_y=bar_y / height)
    for kind, (size, colour) in {"channel": (160, "tab:blue"), "learner": (300, "tab:red")}.items():
        xy = np.array([pos[n] for n in shown if kinds[n] == kind]).reshape(-1, 2)
        ax.scatter(xy[:, 0], xy[:, 1], s=size, c=colour, zorder=2)
    for n in channels:  # the channel's number on its dot; its load in the list below
        ax.annotate(n.split("-")[1], pos[n], ha="center", va="center", fontsize=7, color="white", zorder=4)
    ax.annotate("learner", pos["learner"], xytext=(0, 10), textcoords="offset points", ha="center",
                fontsize=8, zorder=4)
    fig.suptitle(_title(graph, owners, shown is graph, load), fontsize=9)
    fig.text(0.02, 0.1 / height, listing, fontsize=7, va="bottom", family="monospace")
    ax.set_aspect("equal", adjustable="datalim")
    ax.margins(0.08)
    ax.axis("off")
    keep_texts_inside(fig, ax, labels)
    fig.savefig(path, dpi=100, metadata={"Software": None})


def grouped(graph: nx.Graph, load: dict | None) -> nx.Graph:
    """The graph with each channel's owners merged into at most GROUPS_PER_CHANNEL groups of
    consecutive owners: a group node carries its owners' count, records and exchanges."""
    out = nx.Graph()
    out.add_node("learner", kind="learner")
    channels = [n for n, d in graph.nodes(data=True) if d["kind"] == "channel"]
    for channel in channels:
        out.add_node(channel, kind="channel")
        out.add_edge("learner", channel)
        members = sorted((graph.nodes[n]["index"], n) for n in graph.neighbors(channel) if n != "learner")
        groups = min(GROUPS_PER_CHANNEL, max(3, GROUPS // len(channels)), len(members))
        for block in np.array_split(np.arange(len(members)), groups):
            if not len(block):
                continue
            owners = [members[j] for j in block]
            first, last = owners[0][0], owners[-1][0]
            name = f"{channel}-owners-{first}-{last}"
            out.add_node(name, kind="group", count=len(owners), first=first, last=last,
                         records=sum(graph.nodes[n]["records"] for _, n in owners),
                         exchanges=sum(load["exchanges"][i] for i, _ in owners) if load else None)
            out.add_edge(channel, name)
    return out


def _draw_owners(fig, ax, graph: nx.Graph, members: list, pos: dict, *, load: dict | None,
                 bar_y: float) -> list:
    """Owners (or groups of owners) as dots: area by records, colour by exchanges (with a whole-number
    colour bar under the drawing), names if few; returns the name labels drawn."""
    from dpmarket.output.figures.axes import integer_colorbar

    if not members:
        return []
    records = np.array([graph.nodes[n]["records"] for n in members], dtype=float)
    area = 10 + 70 * np.sqrt(records / records.max())
    xy = np.array([pos[n] for n in members]).reshape(-1, 2)
    groups = graph.nodes[members[0]]["kind"] == "group"
    if load is None:
        ax.scatter(xy[:, 0], xy[:, 1], s=area, c="0.3", zorder=3)
    else:
        exchanges = [graph.nodes[n]["exchanges"] if groups else load["exchanges"][graph.nodes[n]["index"]]
                     for n in members]
        dots = ax.scatter(xy[:, 0], xy[:, 1], s=area, c=exchanges, cmap="viridis", zorder=3,
                          edgecolors="0.2", linewidths=0.3)
        place = fig.add_axes((0.3, bar_y, 0.4, 0.018))
        integer_colorbar(fig, dots, exchanges, cax=place, orientation="horizontal",
                         label="exchanges per group of owners" if groups else "exchanges per owner")
    if not groups and len(members) > LABEL_OWNERS_UP_TO:
        return []
    labels = []
    for name in members:
        channel = next(n for n in graph.neighbors(name) if graph.nodes[n]["kind"] == "channel")
        away = pos[name] - np.asarray(pos[channel])
        node = graph.nodes[name]
        text = f"{node['first']}–{node['last']}" if groups else name
        labels.append(ax.annotate(text, pos[name], xytext=8 * away / (np.linalg.norm(away) or 1.0),
                                  textcoords="offset points", ha="left" if away[0] >= 0 else "right",
                                  va="center", fontsize=7, zorder=4))
    return labels


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
    what = "an owner" if each else "a group of owners (numbers beside it)"
    text += f"\nblue: channels; a dot: {what}; area: records"
    return text + ("; colour: exchanges" if load is not None else "")

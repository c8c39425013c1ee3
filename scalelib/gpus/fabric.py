"""GPU networks: a node (NVLink through NVSwitches) and the InfiniBand fat tree above it (DGX SuperPod).

Book: the GPU part, "At the node level" (NVSwitches, the 8xH100 node, Quiz 2), "Beyond the node level"
(scalable units, leaf and spine switches, full bisection bandwidth, GB200 NVL72, Quiz 3) and Appendix B.

All bandwidths are one direction ("full-duplex X GB/s" in the book means X each way); a bisection counts both
directions, as the book's Quiz 2 does. Each level of the tree is summarised by a :class:`TreeLevel`: how many
children meet at it (its degree) and how fast each child reaches it, which is all the collective costs of
:mod:`scalelib.gpus.comm_costs` need.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalelib.gpus import gpu_specs
from scalelib.validate import positive, positive_int

NDR_LINK_BYTES_PER_S = 400e9 / 8  # one NDR InfiniBand port or cable: 400 Gb/s each way
NDR_SWITCH_PORTS = 64


@dataclass(frozen=True)
class Node:
    """One NVLink domain: ``gpus`` GPUs, each joined to every NVSwitch, and one scale-out NIC per GPU."""

    gpu: gpu_specs.GpuSpec
    gpus: int
    nvswitches: int
    nvswitch_ports: int
    nics: int
    nic_bytes_per_s: float = NDR_LINK_BYTES_PER_S

    def __post_init__(self) -> None:
        if self.gpu.nvlink is None:
            raise ValueError(f"{self.gpu.name} has no NVLink generation in the book's table")
        for name in ("gpus", "nvswitches", "nvswitch_ports", "nics"):
            object.__setattr__(self, name, positive_int(f"Node.{name}", getattr(self, name)))
        positive("nic_bytes_per_s", self.nic_bytes_per_s)

    @property
    def link_bytes_per_s(self) -> float:
        return self._nvlink.link_bytes_per_s

    @property
    def _nvlink(self) -> gpu_specs.NvlinkGeneration:
        assert self.gpu.nvlink is not None
        return self.gpu.nvlink

    @property
    def gpu_egress_bytes_per_s(self) -> float:
        """What one GPU pushes into the node over all its NVLink ports (450 GB/s on H100)."""
        return self._nvlink.gpu_egress_bytes_per_s

    @property
    def nvswitch_bytes_per_s(self) -> float:
        """One NVSwitch: every port at the link rate (1.6 TB/s for 64 NVLink 4 ports)."""
        return self.nvswitch_ports * self.link_bytes_per_s

    @property
    def switches_bytes_per_s(self) -> float:
        return self.nvswitches * self.nvswitch_bytes_per_s

    @property
    def gpus_bytes_per_s(self) -> float:
        return self.gpus * self.gpu_egress_bytes_per_s

    @property
    def total_bytes_per_s(self) -> float:
        """What the node can move at once: the smaller of its switches and its GPUs' links (Quiz 2, Q1)."""
        return min(self.switches_bytes_per_s, self.gpus_bytes_per_s)

    def bisection_bytes_per_s(self, directions: int = 2) -> float:
        """Bytes/s across any even split of the node, both directions by default (Quiz 2, Q2)."""
        return self.gpus // 2 * self.gpu_egress_bytes_per_s * directions

    @property
    def egress_bytes_per_s(self) -> float:
        """The node's scale-out egress: its NICs together (400 GB/s for 8 NDR NICs)."""
        return self.nics * self.nic_bytes_per_s

    @property
    def scale_out_bytes_per_s_per_gpu(self) -> float:
        """One GPU's share of the node's egress: what it has in an AllToAll across nodes (50 GB/s)."""
        return self.egress_bytes_per_s / self.gpus


# NVSwitch port counts: 64 for the Hopper generation (the book); 72 for NVLink 5 switch chips, the count that
# lets 2 of them serve 8 GPUs x 18 links (DGX B200) and 18 of them 72 GPUs x 18 links (NVL72).
H100_NODE = Node(gpu_specs.H100, gpus=8, nvswitches=4, nvswitch_ports=64, nics=8)
H200_NODE = Node(gpu_specs.H200, gpus=8, nvswitches=4, nvswitch_ports=64, nics=8)
B200_NODE = Node(gpu_specs.B200, gpus=8, nvswitches=2, nvswitch_ports=72, nics=8)
GB200_NVL72 = Node(gpu_specs.GB200, gpus=72, nvswitches=18, nvswitch_ports=72, nics=72)


@dataclass(frozen=True)
class TreeLevel:
    """One level of a switched tree: ``degree`` children meet here, each reaching it at ``link_bytes_per_s``."""

    name: str
    gpus: int  # GPUs below one switch group of this level
    degree: int
    link_bytes_per_s: float  # one child -> this level, one direction
    switch_bytes_per_s: float  # all switches of one unit at this level, one direction
    cable_bytes_per_s: float  # all cables from this unit's children into it, one direction

    @property
    def collective_bytes_per_s(self) -> float:
        """Ring AllGather bandwidth at this level, D W / (D - 1) (514 GB/s in an H100 node)."""
        if self.degree == 1:
            return math.inf
        return self.degree * self.link_bytes_per_s / (self.degree - 1)


@dataclass(frozen=True)
class ScaleOutPlan:
    """More SUs of one design under one row of spines (Quiz 3, Q2): how many of each, and whether two levels do.

    ``spine_ports_used`` is what each spine would need (one port per cable from every leaf of the pod) and
    ``leaf_up_ports`` what each leaf would need upward (one port per cable to every spine, at least one per spine);
    past either switch's ports the pod needs a third ("core") level, which :attr:`fits` says.
    """

    sus: int
    spines: int
    cables_per_leaf_spine: int
    spine_ports_used: int
    leaf_up_ports: int
    leaf_down_ports: int
    switch_ports: int

    @property
    def fits(self) -> bool:
        """Whether the spines and the leaves have the ports this plan needs (else a third level is needed)."""
        return (self.spine_ports_used <= self.switch_ports
                and self.leaf_down_ports + self.leaf_up_ports <= self.switch_ports)


def scale_out_plan(gpus: int, gpus_per_su: int, leaves_per_su: int, leaf_up_ports: int, switch_ports: int,
                   leaf_down_ports: int = 0) -> ScaleOutPlan:
    """Grow a pod by whole SUs, each keeping its leaves and each leaf its ``leaf_up_ports`` up-links (Quiz 3, Q2).

    The spines are the fewest whose ``switch_ports`` ports take every leaf's up-links; each leaf-spine pair gets
    ``leaf_up_ports // spines`` cables, at least one. ``leaf_down_ports`` (each leaf's node-facing ports) only
    enters :attr:`ScaleOutPlan.fits`. Past one spine's ports the plan does not fit: a third level is needed.
    """
    gpus_per_su = positive_int("gpus_per_su", gpus_per_su)
    leaves_per_su = positive_int("leaves_per_su", leaves_per_su)
    leaf_up_ports = positive_int("leaf_up_ports", leaf_up_ports)
    switch_ports = positive_int("switch_ports", switch_ports)
    if leaf_down_ports != 0:
        leaf_down_ports = positive_int("leaf_down_ports", leaf_down_ports)
    gpus = positive_int("gpus", gpus)
    if gpus % gpus_per_su:
        raise ValueError(f"gpus must be a multiple of one SU ({gpus_per_su} GPUs), got {gpus!r}")
    sus = gpus // gpus_per_su
    spines = math.ceil(sus * leaves_per_su * leaf_up_ports / switch_ports)
    cables = max(1, leaf_up_ports // spines)
    return ScaleOutPlan(sus, spines, cables, sus * leaves_per_su * cables, spines * cables, leaf_down_ports,
                        switch_ports)


@dataclass(frozen=True)
class SuperPod:
    """A DGX-style fat tree: nodes in scalable units (SUs) under leaf switches, SUs under spine switches.

    The reference H100 SuperPod: 4 SUs of 32 nodes, 8 leaf switches per SU, 16 spine switches, every leaf
    joined to every spine by 2 cables, all NDR InfiniBand (64 ports of 50 GB/s per switch).

    Each leaf switch's ports are of two kinds: its node-facing (down) ports, one per NIC cable that lands on it
    (an SU's NIC cables are spread evenly over its leaves), and its up ports, ``cables_per_leaf_spine`` to each
    spine. Ports left over carry nothing. A pod whose switches lack the ports its cables need is refused: it
    cannot be cabled (book: "Beyond the node level", and Quiz 3, Q2 for what a larger pod needs).
    """

    node: Node
    nodes_per_su: int = 32
    sus: int = 4
    leaves_per_su: int = 8
    spines: int = 16
    cables_per_leaf_spine: int = 2
    ib_switch_ports: int = NDR_SWITCH_PORTS
    ib_link_bytes_per_s: float = NDR_LINK_BYTES_PER_S

    def __post_init__(self) -> None:
        for name in ("nodes_per_su", "sus", "leaves_per_su", "spines", "cables_per_leaf_spine", "ib_switch_ports"):
            object.__setattr__(self, name, positive_int(f"SuperPod.{name}", getattr(self, name)))
        positive("ib_link_bytes_per_s", self.ib_link_bytes_per_s)
        nic_cables = self.nodes_per_su * self.node.nics
        if nic_cables % self.leaves_per_su:
            raise ValueError(
                f"the {nic_cables} NIC cables of one SU ({self.nodes_per_su} nodes x {self.node.nics} NICs) do not "
                f"divide evenly over its {self.leaves_per_su} leaf switches: choose leaves_per_su dividing "
                f"{nic_cables}")
        down, up, ports = self.leaf_down_ports, self.leaf_up_ports, self.ib_switch_ports
        if down + up > ports:
            raise ValueError(
                f"each leaf switch needs {down} node-facing ports ({nic_cables} NIC cables over {self.leaves_per_su} "
                f"leaves) + {up} up ports ({self.spines} spines x {self.cables_per_leaf_spine} cables) = {down + up}, "
                f"but a switch has {ports}: use more leaves per SU, fewer nodes per SU, fewer spines or fewer "
                f"cables per leaf-spine pair")
        if self.spine_ports_used > ports:
            raise ValueError(
                f"each spine switch needs {self.spine_ports_used} ports ({self.leaves} leaves x "
                f"{self.cables_per_leaf_spine} cables), but a switch has {ports}: use fewer cables per leaf-spine "
                f"pair or fewer SUs, or add a third (core) level above the spines")

    # ---- counts ----
    @property
    def nodes(self) -> int:
        return self.nodes_per_su * self.sus

    @property
    def gpus(self) -> int:
        return self.nodes * self.node.gpus

    @property
    def gpus_per_su(self) -> int:
        return self.nodes_per_su * self.node.gpus

    @property
    def leaves(self) -> int:
        return self.leaves_per_su * self.sus

    @property
    def switches(self) -> int:
        """NVSwitches, leaf and spine switches together (560 in the reference pod)."""
        return self.nodes * self.node.nvswitches + self.leaves + self.spines

    @property
    def leaf_down_ports(self) -> int:
        """Ports of each leaf that face nodes: the NIC cables landing on it (32 of 64 in the reference pod)."""
        return self.nodes_per_su * self.node.nics // self.leaves_per_su

    @property
    def leaf_up_ports(self) -> int:
        """Ports of each leaf that face the spines: ``cables_per_leaf_spine`` to each (the other 32 of 64)."""
        return self.spines * self.cables_per_leaf_spine

    @property
    def spine_ports_used(self) -> int:
        """Ports each spine switch needs: one cable bundle from every leaf."""
        return self.leaves * self.cables_per_leaf_spine

    @property
    def leaf_oversubscription(self) -> float:
        """Each leaf's node-facing ports over its up ports: above 1, traffic leaving an SU waits at the leaves."""
        return self.leaf_down_ports / self.leaf_up_ports

    # ---- bandwidths, one direction ----
    @property
    def ib_switch_bytes_per_s(self) -> float:
        """One NDR switch: 64 ports x 50 GB/s = 3.2 TB/s."""
        return self.ib_switch_ports * self.ib_link_bytes_per_s

    @property
    def node_to_leaf_bytes_per_s(self) -> float:
        return self.node.egress_bytes_per_s

    @property
    def su_leaf_ingress_bytes_per_s(self) -> float:
        """All node-facing leaf ports of one SU (12.8 TB/s)."""
        return self.leaves_per_su * self.leaf_down_ports * self.ib_link_bytes_per_s

    @property
    def su_leaf_through_bytes_per_s(self) -> float:
        """What one SU's leaves carry between its nodes and the spines: each leaf passes the smaller of its down
        and its up ports' worth (12.8 TB/s in the reference pod, where the two halves match)."""
        return self.leaves_per_su * min(self.leaf_down_ports, self.leaf_up_ports) * self.ib_link_bytes_per_s

    @property
    def su_leaf_switch_bytes_per_s(self) -> float:
        """All ports of one SU's leaf switches, both halves (25.6 TB/s)."""
        return self.leaves_per_su * self.ib_switch_bytes_per_s

    @property
    def su_to_spine_bytes_per_s(self) -> float:
        """Cables from one SU's leaves to the spines (12.8 TB/s)."""
        return leaf_spine_bytes_per_s(self.leaves_per_su, self.spines, self.cables_per_leaf_spine,
                                      self.ib_link_bytes_per_s)

    @property
    def spine_switch_bytes_per_s(self) -> float:
        """All spine switches together (51.2 TB/s)."""
        return self.spines * self.ib_switch_bytes_per_s

    @property
    def spine_cable_bytes_per_s(self) -> float:
        return self.sus * self.su_to_spine_bytes_per_s

    def bisection_bytes_per_s(self, directions: int = 2) -> float:
        """Bytes/s across any even split of the nodes when every node egresses at full rate."""
        return self.nodes // 2 * self.node.egress_bytes_per_s * directions

    def levels(self) -> tuple[TreeLevel, TreeLevel, TreeLevel]:
        """Node, leaf (one SU) and spine levels, as in the book's SuperPod summary table."""
        node = self.node
        return (
            TreeLevel("node", node.gpus, node.gpus, node.gpu_egress_bytes_per_s, node.switches_bytes_per_s,
                      node.gpus_bytes_per_s),
            TreeLevel("leaf", self.gpus_per_su, self.nodes_per_su, node.egress_bytes_per_s,
                      self.su_leaf_switch_bytes_per_s, self.su_leaf_ingress_bytes_per_s),
            TreeLevel("spine", self.gpus, self.sus, self.su_to_spine_bytes_per_s, self.spine_switch_bytes_per_s,
                      self.spine_cable_bytes_per_s),
        )

    def per_node_bytes_per_s(self) -> dict[str, float]:
        """Each level's capacity shared by the nodes below it (all 400 GB/s in a full-bisection tree).

        "leaf" is what one SU's leaves carry out of the SU per node (:attr:`su_leaf_through_bytes_per_s`): less
        than a node's egress when the leaves have fewer up ports than node-facing ones (oversubscribed)."""
        return {"node egress": self.node.egress_bytes_per_s,
                "leaf": self.su_leaf_through_bytes_per_s / self.nodes_per_su,
                "spine cables": self.spine_cable_bytes_per_s / self.nodes,
                "spine switches": self.spine_switch_bytes_per_s / self.nodes}

    @property
    def full_bisection(self) -> bool:
        """Whether no level above the nodes gives a node less than its own egress."""
        return min(self.per_node_bytes_per_s().values()) >= self.node.egress_bytes_per_s

    def scale_out_plan(self, gpus: int) -> ScaleOutPlan:
        """The same SUs and leaves, more SUs and spines, each leaf keeping all its up-links (Quiz 3, Q2); the plan
        says whether two levels still do (:attr:`ScaleOutPlan.fits`), e.g. not for 4096 H100s."""
        return scale_out_plan(gpus, self.gpus_per_su, self.leaves_per_su, self.leaf_up_ports, self.ib_switch_ports,
                              self.leaf_down_ports)

    def scaled_to(self, gpus: int) -> SuperPod:
        """The pod of :meth:`scale_out_plan`: each SU keeps all its uplinks (Quiz 3, Q2).

        Spines grow with the SUs so each leaf's up-ports still land somewhere; the cables between one leaf and
        one spine shrink to keep the count per leaf. Past one spine's ports a third level is needed, which this
        two-level model does not build: it refuses, and :meth:`scale_out_plan` says how many ports are missing.
        """
        plan = self.scale_out_plan(gpus)
        if not plan.fits:
            raise ValueError(
                f"{gpus} GPUs do not fit two levels: each spine would need {plan.spine_ports_used} ports and each "
                f"leaf {plan.leaf_down_ports} + {plan.leaf_up_ports}, but a switch has {plan.switch_ports}; a third "
                f"(core) level is needed (scale_out_plan({gpus}) gives the counts)")
        return SuperPod(self.node, self.nodes_per_su, plan.sus, self.leaves_per_su, plan.spines,
                        plan.cables_per_leaf_spine, self.ib_switch_ports, self.ib_link_bytes_per_s)


H100_SUPERPOD = SuperPod(H100_NODE)
B200_SUPERPOD = SuperPod(B200_NODE)


def switch_bytes_per_s(switches: int, ports: int, port_bytes_per_s: float) -> float:
    """Capacity of ``switches`` switches of ``ports`` ports each (one direction)."""
    return switches * ports * positive("port_bytes_per_s", port_bytes_per_s)


def leaf_spine_bytes_per_s(leaves: int, spines: int, cables_per_leaf_spine: int, link_bytes_per_s: float) -> float:
    """The cables from ``leaves`` leaf switches to each of ``spines`` spines (one direction): what one SU sends to
    the spine level (12.8 TB/s for the reference SU: 8 leaves x 16 spines x 2 cables x 50 GB/s; Quiz 3, Q1)."""
    cables = positive_int("leaves", leaves) * positive_int("spines", spines) * positive_int(
        "cables_per_leaf_spine", cables_per_leaf_spine)
    return cables * positive("link_bytes_per_s", link_bytes_per_s)


def bits_to_bytes_per_s(links: int, link_bits_per_s: float) -> float:
    """``links`` links of ``link_bits_per_s`` (network rates are quoted in bits) in bytes/s."""
    return links * positive("link_bits_per_s", link_bits_per_s) / 8

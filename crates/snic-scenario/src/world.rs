//! Building the testbed a scenario describes: NICs (pipeline with vSwitch / P4 / XDP stages,
//! the NIC's own packets, RoCE engine and memory), switches, links with impairments, traffic
//! sources, and a capture of every port's output.

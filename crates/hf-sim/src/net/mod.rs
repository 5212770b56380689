//! The network side of the simulator (clock, links, hosts, record): being built.

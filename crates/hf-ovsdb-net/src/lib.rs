//! hf-ovsdb-net: JSON-RPC 1.0 over streams for OVSDB, and the holdfast OVSDB server.

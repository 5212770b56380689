//! hf-ovsdb: the RFC 7047 data model, sans-I/O.
//!
//! What it does: parses and validates `.ovsschema` files; atoms and datums; conditions,
//! mutations and whole transactions; monitors; the standalone database file format.
//! What it does not do: sockets, threads, files or clocks. Callers pass bytes and time in and
//! write what it returns; `hf-ovsdb-net` is the I/O shell.

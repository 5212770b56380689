//! The simulated world (database, northd, chassis, hosts, scenarios): being built.

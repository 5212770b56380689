//! `holdfast northd` as a process, against real tools (issue 10's daemon acceptance points):
//! real `ovn-nbctl --wait=sb`/`--wait=hv` against `holdfast db` and real `ovsdb-server`,
//! `ovn-ctl start_northd`/`stop_northd` through the `ovn-northd` link, every unixctl command
//! through `ovn-appctl`, active/standby (two holdfast northds; holdfast behind a real
//! ovn-northd), and the incremental sync (exact row sets, silent restarts, NB rebuilds).
#![allow(clippy::disallowed_methods, clippy::unwrap_used)]

mod common;

#[path = "northd/cluster.rs"]
mod cluster;
#[path = "northd/fixture.rs"]
mod fixture;
#[path = "northd/ha.rs"]
mod ha;
#[path = "northd/incremental.rs"]
mod incremental;
#[path = "northd/tls.rs"]
mod tls;
#[path = "northd/wait.rs"]
mod wait;

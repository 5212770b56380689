//! holdfast's harness for real-network tests and benchmarks, and the real OVS/OVN daemons the
//! tests compare with.
//!
//! **Layer:** test support. A dev-dependency of the test trees and a dependency of `hf-bench`;
//! never a dependency of the `holdfast` binary.
//!
//! # What it does
//!
//! - [`Lab`]: everything one test creates on the real kernel: network namespaces ([`Netns`]),
//!   veth pairs between them ([`Veth`]), processes spawned inside them ([`Proc`]) and a
//!   directory for their logs. Every name carries the lab's tag `hf<pid>x<n>`, so tests running
//!   in parallel, in one process or in several, never collide.
//! - Traffic with the real tools: [`Netns::ping`], a one-shot TCP exchange with `nc`
//!   ([`nc_exchange`]), `iperf3` servers and clients whose `--json` reports are parsed
//!   ([`Iperf3Report`]: a reset or any other failure is an error that carries what was
//!   transferred), a DHCPv4 client that changes nothing outside its namespace
//!   ([`Netns::dhcp`]), and the kernel's own conntrack table ([`conntrack`]).
//! - [`require_root`] / [`require_tools`]: a test that cannot run prints one `SKIP: <test>: why`
//!   line and returns; under `CI=true` it fails instead (a missing dependency never skips in CI).
//! - [`ovn`]: real `ovsdb-server`, `ovn-northd`, `ovs-vswitchd --enable-dummy` and
//!   `ovn-controller` in a temporary directory, `--detach`ed with pidfiles and stopped by pid on
//!   drop; [`cmd`]: running commands with a timeout and an error that names the command, its
//!   status and what it printed.
//! - [`holdfast`]: a holdfast network on real interfaces: the central `holdfast db` and
//!   `holdfast northd`, and chassis namespaces with their local OVS database (set up with real
//!   `ovs-vsctl`), `holdfast datapath` and `holdfast controller`; VMs plugged as a CNI does.
//!
//! # What it does not do
//!
//! - It never touches the host's own interfaces, routes, firewall or conntrack: every link,
//!   address, route and nftables rule it makes lives in a namespace of the lab, and no namespace
//!   gets a route out. Reading the host's conntrack table ([`conntrack::host`]) only reads.
//! - It does not build or find holdfast: [`holdfast`] starts the binary its caller names (a
//!   test's `CARGO_BIN_EXE_holdfast`, the one a benchmark was built beside), and tests of one
//!   daemon spawn it themselves with [`Netns::spawn`] or [`Netns::command`].
//! - It does not install anything: `scripts/test.sh` installs iproute2, iperf3, netcat-openbsd,
//!   busybox, ethtool, conntrack, nftables and iputils-ping.
//!
//! # Invariants
//!
//! - Cleanup happens in every way a test can end. [`Lab`]'s `Drop` (also while unwinding from a
//!   panic) stops the lab's processes (their process groups: SIGTERM, then SIGKILL), kills every
//!   process still inside one of its namespaces, deletes the namespaces in reverse order (which
//!   deletes their veths) and removes its directory. SIGINT, SIGTERM and SIGHUP run the same
//!   cleanup for every live lab of the process, then exit. A lab left by a process that died
//!   without either (SIGKILL, abort) is removed by [`sweep_stale`], which the first [`Lab::new`]
//!   of every process calls: the tag's pid is no longer alive.
//! - A process spawned with [`Netns::spawn`] whose test fails has its output printed (the tail
//!   of its stdout and stderr) before its files are removed.
//!
//! # Use
//!
//! ```no_run
//! # fn main() -> hf_testkit::Result<()> {
//! use hf_testkit::{Iperf3Opts, Lab};
//! if !hf_testkit::require_root("two_namespaces", "network namespaces") {
//!     return Ok(());
//! }
//! let lab = Lab::new()?;
//! let (a, b) = (lab.netns("a")?, lab.netns("b")?);
//! lab.veth((&a, "eth0"), (&b, "eth0"))?;
//! a.addr_add("eth0", "192.0.2.1/24")?;
//! b.addr_add("eth0", "192.0.2.2/24")?;
//! assert_eq!(a.ping("192.0.2.2", 3)?.received, 3);
//! let _server = b.iperf3_server("192.0.2.2", 5201)?;
//! let report = a.iperf3(&Iperf3Opts::new("192.0.2.2", 5201))?;
//! assert!(report.received_bytes > 0);
//! # Ok(())
//! # }
//! ```
//!
//! Every fallible call returns [`Result`]; a test returns `hf_testkit::Result<()>` and uses `?`,
//! and a failure prints the whole message (the error's `Debug` is its `Display`).

// A test harness is an I/O shell: it reads the clock, spawns processes and threads.
#![allow(clippy::disallowed_methods)]

pub mod acl_log;
pub mod cmd;
pub mod conntrack;
mod error;
pub mod holdfast;
mod lab;
pub mod ovn;
mod proc;
mod skip;
mod traffic;

pub use error::{KitError, Result};
pub use lab::{Lab, Netns, Veth, VethEnd, VethOpts, VmIface, sweep_stale};
pub use proc::Proc;
pub use skip::{is_ci, require_root, require_tools, skip_or_fail};
pub use traffic::{
    DhcpLease, Exchange, Iperf3Client, Iperf3Interval, Iperf3Opts, Iperf3Report, Iperf3Server,
    PingStats, nc_exchange,
};

//! `holdfast sandbox`'s command line.

use clap::{Args, ValueEnum};

/// A story the sandbox can run (`--scenario NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Ping between hosts on different chassis, a TCP transfer across chassis (Geneve) and one
    /// through the gateway's SNAT to the external host; exits 0 when every step succeeded.
    Default,
    /// TCP transfers across chassis and through SNAT keep running while every controller and
    /// northd restart: no segment retransmitted, no reset, no zone changed or flushed.
    Restarts,
    /// Incident D: OVN-Kubernetes's shared gateway (the SNAT routers ask for the host's
    /// conntrack zone, options:snat-ct-zone=0), then the same transfers while every controller
    /// stops, both databases are rebuilt (every row again with new UUIDs, the same names) and
    /// every controller starts: nothing lost, no zone changed or flushed. `rebuild` is an alias.
    #[value(alias = "rebuild")]
    DbRebuild,
    /// Incident C: a VM with a security group live-migrates there and back while it downloads
    /// from the external host and streams to a VM on another hypervisor. On the default
    /// topology it has its own egress address (a distributed dnat_and_snat) and every
    /// connection keeps going; on ovnk-l2 its egress is SNATed to the node's address and the
    /// download breaks (the story fails, as incident C did).
    LiveMigration,
    /// Incident A: a pod's per-pod snat row on OVN-Kubernetes' shared gateway router rewrites
    /// its traffic to etcd on another node's host network, which refuses the node's address
    /// (mutual TLS); the same row scoped with exempted_ext_ips, allowed_ext_ips or the NAT
    /// match keeps the pod's address while the outside still sees the node's and NodePort
    /// replies still work. Runs in its own simulated cluster.
    SnatExemption,
    /// Incident B: the controllers start at feature level hf-1, a security group (stateful
    /// ACLs on port groups) guards TCP streams across chassis; the newer SB form is forced
    /// (ignore_chassis_features) and taken back, then every controller is upgraded to hf-2 one
    /// by one and northd restarted. Fails on a reset, a retransmission, an unverified byte, a
    /// parse error during the upgrade, or an SB form change before every chassis has hf-2.
    Upgrade,
}

impl Scenario {
    /// The topology the story runs on without `--topology`: OVN-Kubernetes's for incident D.
    pub fn default_topology(self) -> TopologyKind {
        match self {
            Scenario::DbRebuild => TopologyKind::OvnkL2,
            _ => TopologyKind::Default,
        }
    }

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Default => "default",
            Scenario::Restarts => "restarts",
            Scenario::DbRebuild => "db-rebuild",
            Scenario::LiveMigration => "live-migration",
            Scenario::SnatExemption => "snat-exemption",
            Scenario::Upgrade => "upgrade",
        }
    }
}

/// The topology the sandbox builds (`--topology NAME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TopologyKind {
    /// Two switches behind a distributed router whose gateway port on gw1 SNATs to the
    /// provider network physnet1, where the external host is.
    Default,
    /// OVN-Kubernetes' layer-2 design (incident C's): one switch spanning the hypervisors, one
    /// gateway router per node SNATing to that node's own address, no gateway chassis.
    OvnkL2,
}

impl TopologyKind {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TopologyKind::Default => "default",
            TopologyKind::OvnkL2 => "ovnk-l2",
        }
    }
}

const AFTER_HELP: &str = "\
Without --scenario the sandbox comes up, runs the default story, prints how to explore it and \
stays up (Ctrl-C stops it). While it runs, real OVN tools drive it:

  ovn-nbctl --db=tcp:127.0.0.1:6641 show
  ovn-sbctl --db=tcp:127.0.0.1:6642 show
  ovn-nbctl --db=tcp:127.0.0.1:6641 --wait=hv lsp-add ls1 p9 -- \\
      lsp-set-addresses p9 \"00:00:00:00:01:09 10.0.1.9\"

A new switch port with addresses gets a simulated host at once, which the sandbox pings and \
reports. Its control socket (--unixctl PATH, printed at start-up) takes commands from \
ovs-appctl:

  ovs-appctl -t PATH sandbox/ping vm1 vm4
  ovs-appctl -t PATH sandbox/stream s1 vm1 ext1 tcp --download
  ovs-appctl -t PATH sandbox/restart controller hv1
  ovs-appctl -t PATH sandbox/report --format json
  ovs-appctl -t PATH list-commands

Scenarios (--scenario NAME):
  default   ping across chassis, TCP across chassis and through SNAT to the external host
  restarts  TCP transfers while every controller and northd restart: nothing lost, no zone
            changed or flushed
  db-rebuild (alias: rebuild)
            incident D: the SNAT routers ask for zone 0 (options:snat-ct-zone=0, as
            OVN-Kubernetes's gateway routers do; holdfast gives them zones by name), then the
            same transfers while every controller stops, NB and SB are rebuilt with new UUIDs
            and the same names, and every controller starts; prints the zone maps before and
            after (identical), the flushes (none), resets and bytes verified. Default topology:
            ovnk-l2
  live-migration
            incident C: vm1, with a security group (and on the default topology its own
            egress address, a distributed dnat_and_snat), migrates hv1 -> hv2 -> hv1 while it
            downloads from the external host and streams to a VM on another hypervisor; fails
            on a reset, a retransmission timeout, a stall of 50 ms or more, an unverified byte
            or a changed address (on --topology ovnk-l2 it fails by design: the download breaks
            when the VM's egress moves to the new node's address)
  snat-exemption
            incident A, in its own simulated cluster (OVN-Kubernetes' shared gateway; no
            --topology or --chassis, no databases served): the per-pod snat row rewrites the pod's connection to etcd, which
            refuses the node's address; scoped with exempted_ext_ips, allowed_ext_ips or the
            NAT match, etcd sees the pod, the outside still sees the node, NodePort replies work
  upgrade   incident B: controllers start at feature level hf-1; TCP streams through a
            security group (stateful ACLs on port groups); the newer SB form forced with
            ignore_chassis_features (hf-1 controllers keep their last good flows) and taken
            back; then every controller upgraded to hf-2 one by one and northd restarted;
            a report line per step (advertised levels, SB form, parse errors, resets,
            retransmissions)

Topologies (--topology NAME):
  default   ls1 and ls2 behind the distributed router lr0; SNAT to 172.16.0.100 on the
            gateway chassis gw1, to the provider network physnet1 (the external host ext1)
  ovnk-l2   OVN-Kubernetes' layer-2 design: switch l2 across the hypervisors, a gateway
            router GR_hvN per node (the same gateway 10.100.0.1 on every node) SNATing to the
            node's own address on physnet1 (172.16.0.11 for hv1, .12 for hv2, ...); no gateway
            chassis, no floating IP";

/// `holdfast sandbox [OPTIONS]`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct SandboxArgs {
    /// TCP port on 127.0.0.1 for the northbound database (0 picks a free port; the sandbox
    /// prints the one it got). Every database is served on both ports.
    #[arg(long, value_name = "PORT", default_value_t = 6641)]
    pub nb_port: u16,

    /// TCP port on 127.0.0.1 for the southbound database (0 picks a free port, printed).
    #[arg(long, value_name = "PORT", default_value_t = 6642)]
    pub sb_port: u16,

    /// Run the named story, print its outcome and exit (status 1 when a step failed) instead of
    /// staying up.
    #[arg(long, value_name = "NAME")]
    pub scenario: Option<Scenario>,

    /// The topology to build: `default` (two switches behind a distributed router, SNAT on the
    /// gateway chassis gw1 to the provider network physnet1) or `ovnk-l2` (OVN-Kubernetes'
    /// layer-2 design: one switch across the hypervisors, every hypervisor its own gateway
    /// router SNATing to its own address).
    /// Default: `default`, or `ovnk-l2` with `--scenario db-rebuild`.
    #[arg(long, value_name = "NAME")]
    pub topology: Option<TopologyKind>,

    /// Seed of the simulated world (database UUIDs, the hosts' TCP sequence numbers and ports):
    /// the same seed gives the same run.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,

    /// Number of hypervisor chassis (hv1, hv2, ...; 2 to 32), besides the default topology's
    /// gateway chassis gw1. Hosts are spread over them in turn, two per hypervisor.
    #[arg(long, value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u16).range(2..=32))]
    pub chassis: u16,

    /// The control socket `ovs-appctl -t PATH` talks to (`ovs-appctl -t PATH list-commands`
    /// lists its commands: pings, streams, restarts, handoffs, rebuilds, migrations, reports).
    /// Default: holdfast-sandbox.PID.ctl in $OVN_RUNDIR (or $OVS_RUNDIR), else in the
    /// temporary directory; the sandbox prints the path. Not with --scenario.
    #[arg(long, value_name = "PATH", conflicts_with = "scenario")]
    pub unixctl: Option<std::path::PathBuf>,

    /// Print only the listening line, the outcome of each step and errors (no progress, no
    /// topology, no commands to try).
    #[arg(long, short, conflicts_with = "verbose")]
    pub quiet: bool,

    /// Also print every log line of the world's components (northd, each chassis's
    /// controller and datapath) on stderr; without it only warnings and errors are printed.
    #[arg(long, short)]
    pub verbose: bool,
}

impl SandboxArgs {
    /// Checks clap cannot express.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.nb_port != 0 && self.nb_port == self.sb_port {
            anyhow::bail!(
                "--nb-port and --sb-port are both {}: give two different ports (or 0 for free ones)",
                self.nb_port
            );
        }
        if self.scenario == Some(Scenario::SnatExemption) {
            if let Some(t) = self.topology {
                anyhow::bail!(
                    "--scenario snat-exemption builds its own cluster (OVN-Kubernetes' shared \
                     gateway, incident A's design): --topology {} does not apply; leave it out",
                    t.name()
                );
            }
            if self.chassis != 2 {
                anyhow::bail!(
                    "--scenario snat-exemption builds its own cluster with 2 chassis: --chassis {} \
                     does not apply; leave it out",
                    self.chassis
                );
            }
        }
        Ok(())
    }

    /// The topology to build: `--topology`, else the scenario's default.
    pub fn topology_kind(&self) -> TopologyKind {
        self.topology.unwrap_or_else(|| {
            self.scenario
                .map_or(TopologyKind::Default, Scenario::default_topology)
        })
    }
}

//! A logical flow as northd builds it: typed match and actions (hf-expr trees), the stage, and
//! the owner its stable identity comes from. Text appears only in [`crate::render`].
//!
//! Identity (DESIGN "Seams: flow identity"): `hf-flow-id` is a stable hash of (pipeline, stage,
//! owner, discriminator), never of a UUID and never of the flow's text, so a flow whose match
//! or actions change keeps its identity and a database rebuilt with new UUIDs gives the same
//! identities. A flow shared by a datapath group is owned once, without a datapath
//! ([`Owner::shared`]).

use std::fmt::Write as _;

use hf_expr::actions::Action;
use hf_expr::ast::Expr;
use uuid::Uuid;

use crate::stage::Stage;

/// What a flow exists for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Owner {
    /// A datapath's own flows (defaults, per-switch or per-router settings), by datapath name.
    Datapath(String),
    /// A logical switch port or router port, by name.
    Port(String),
    /// A port group, by name.
    PortGroup(String),
    /// A load balancer, by name.
    LoadBalancer(String),
    /// A NAT row: (router name, type, logical_ip, external_ip).
    Nat {
        /// Router name.
        router: String,
        /// `snat`, `dnat`, `dnat_and_snat`.
        kind: String,
        /// `logical_ip`.
        logical_ip: String,
        /// `external_ip`.
        external_ip: String,
    },
    /// An ACL: (switch or port-group name, direction, priority, its NB match text).
    Acl {
        /// The switch or port group holding it.
        holder: String,
        /// `from-lport` / `to-lport`.
        direction: String,
        /// NB priority.
        priority: i64,
        /// NB match text.
        nb_match: String,
    },
    /// A static route: (router name, route table, ip_prefix, nexthop).
    Route {
        /// Router name.
        router: String,
        /// Route table (`""` for the main one).
        table: String,
        /// Prefix as written in NB.
        prefix: String,
        /// Next hop as written in NB.
        nexthop: String,
    },
    /// A router policy: (router name, priority, NB match text).
    Policy {
        /// Router name.
        router: String,
        /// NB priority.
        priority: i64,
        /// NB match text.
        nb_match: String,
    },
    /// Flows every datapath of a kind has, shared through a datapath group.
    Shared,
}

impl Owner {
    /// The owner used when identical flows of several datapaths are written once with a
    /// datapath group.
    pub fn shared() -> Owner {
        Owner::Shared
    }

    pub(crate) fn write_key(&self, out: &mut String) {
        // Fields are separated by a byte that NB names cannot contain unescaped in practice;
        // the kind prefix keeps different kinds apart.
        let _ = match self {
            Owner::Datapath(n) => write!(out, "dp\x1f{n}"),
            Owner::Port(n) => write!(out, "port\x1f{n}"),
            Owner::PortGroup(n) => write!(out, "pg\x1f{n}"),
            Owner::LoadBalancer(n) => write!(out, "lb\x1f{n}"),
            Owner::Nat {
                router,
                kind,
                logical_ip,
                external_ip,
            } => write!(
                out,
                "nat\x1f{router}\x1f{kind}\x1f{logical_ip}\x1f{external_ip}"
            ),
            Owner::Acl {
                holder,
                direction,
                priority,
                nb_match,
            } => write!(
                out,
                "acl\x1f{holder}\x1f{direction}\x1f{priority}\x1f{nb_match}"
            ),
            Owner::Route {
                router,
                table,
                prefix,
                nexthop,
            } => write!(out, "route\x1f{router}\x1f{table}\x1f{prefix}\x1f{nexthop}"),
            Owner::Policy {
                router,
                priority,
                nb_match,
            } => write!(out, "policy\x1f{router}\x1f{priority}\x1f{nb_match}"),
            Owner::Shared => write!(out, "shared"),
        };
    }
}

/// A flow's stable identity (`external_ids:hf-flow-id`, 16 hex digits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowId(pub u64);

impl FlowId {
    /// The identity of a flow of `stage` owned by `owner`, told apart from the owner's other
    /// flows in that stage by `disc`. `dp` is the datapath name for flows written per
    /// datapath, `None` for flows shared by a group.
    pub fn new(stage: Stage, owner: &Owner, disc: &str, dp: Option<&str>) -> FlowId {
        let mut key = String::with_capacity(64);
        key.push_str(stage.pipeline().name());
        key.push('\x1e');
        key.push_str(stage.name());
        key.push('\x1e');
        owner.write_key(&mut key);
        key.push('\x1e');
        key.push_str(disc);
        if let Some(dp) = dp {
            key.push('\x1e');
            key.push_str(dp);
        }
        FlowId(fnv1a64(key.as_bytes()))
    }

    /// Parses the text form.
    pub fn parse(s: &str) -> Option<FlowId> {
        if s.len() != 16 {
            return None;
        }
        u64::from_str_radix(s, 16).ok().map(FlowId)
    }
}

impl std::fmt::Display for FlowId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms (std's hashers are not).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_parts([bytes])
}

/// [`fnv1a64`] of the concatenation of `parts`, without concatenating them.
pub fn fnv1a64_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Where a flow is written: one datapath (by index into [`crate::topo::Topo::datapaths`]).
pub type DpIdx = usize;

/// One logical flow.
#[derive(Clone, Debug, PartialEq)]
pub struct Flow {
    /// The datapath it belongs to.
    pub dp: DpIdx,
    /// Its stage (and so pipeline and table).
    pub stage: Stage,
    /// Priority.
    pub priority: u16,
    /// The match.
    pub matches: Expr,
    /// The actions.
    pub actions: Vec<Action>,
    /// What it exists for.
    pub owner: Owner,
    /// Tells the owner's flows in one stage apart (`"arp-reply"`, `"ip4"`, an address...).
    pub disc: String,
    /// The NB row it came from (`external_ids:stage-hint`, the first 8 hex digits of the UUID).
    pub hint: Option<Uuid>,
    /// `controller_meter`.
    pub meter: Option<String>,
    /// `external_ids:hf-acl-broken` (`last-good` or `fail-closed`): the flow stands in for an
    /// ACL whose match does not parse.
    pub mark: Option<crate::ls::index::AclBroken>,
}

/// The flows of one compile, in the order stages emitted them.
#[derive(Debug, Default)]
pub struct Flows {
    /// Every flow.
    pub flows: Vec<Flow>,
}

impl Flows {
    /// Adds a flow.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        dp: DpIdx,
        stage: Stage,
        priority: u16,
        matches: Expr,
        actions: Vec<Action>,
        owner: Owner,
        disc: impl Into<String>,
        hint: Option<Uuid>,
    ) {
        self.flows.push(Flow {
            dp,
            stage,
            priority,
            matches,
            actions,
            owner,
            disc: disc.into(),
            hint,
            meter: None,
            mark: None,
        });
    }

    /// Adds a flow with every field given.
    pub fn push(&mut self, flow: Flow) {
        self.flows.push(flow);
    }

    /// Number of flows.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }
}

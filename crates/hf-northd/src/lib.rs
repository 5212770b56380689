//! hf-northd: holdfast's northd core. Compiles the OVN northbound (hf-model's typed rows) into
//! what every chassis executes: `Datapath_Binding`, `Port_Binding`, `Logical_Flow` (with
//! `Logical_DP_Group`), `Multicast_Group`, `Port_Group`, `Address_Set`, `Load_Balancer` and
//! `SB_Global` contents, as an [`output::SbDesired`] keyed by names and flow identities.
//! Sans-I/O: no sockets, no clock, no threads; the `holdfast northd` daemon is the shell.
//!
//! How a compile goes ([`compile`]):
//! 1. [`topo::Topo::build`] digests NB once: datapaths and ports by name, addresses parsed,
//!    peers resolved, tunnel keys kept from SB by name (stable across restarts and NB
//!    rebuilds). Bad rows become [`diag::Diagnostic`]s and are left out.
//! 2. The switch ([`ls`]) and router ([`lr`]) pipelines, one module per stage, add typed
//!    [`flow::Flow`]s: hf-expr match trees and actions, an [`stage::Stage`] (table numbers are
//!    derived), registers from [`regs::Reg`], an [`flow::Owner`] for the flow's identity.
//! 3. [`render`] lowers flows to the features every chassis has, prints them, merges flows
//!    repeated across datapaths into datapath groups and assigns `hf-flow-id`s.
//!
//! Before a compile the daemon runs [`features::negotiate`] over the SB `Chassis` rows: it
//! gives the feature set flows may use (stages choose older formulations below a feature,
//! `render` lowers or fails closed the rest), the datapaths whose SB flows must stay as they
//! are, and the unsupported chassis to report ([`features::Negotiated::apply`] puts it into
//! [`Options`]).
//!
//! What it does not do: talk to databases (the daemon syncs [`output::SbDesired`] against SB
//! through the client replica; it writes the dynamic addresses [`ipam::plan`] decides, which
//! the compile then reads from NB), or run BFD or probe service monitors ([`svc`] plans
//! the `Service_Monitor` rows and which backends a health-checked VIP lists).

pub mod addr;
pub mod bfd;
pub mod build;
pub mod copp;
pub mod daemon;
pub mod diag;
pub mod features;
pub mod flow;
pub mod incremental;
pub mod ipam;
pub mod lb_event;
pub mod lb_template;
pub mod lr;
pub mod ls;
pub mod output;
pub mod regs;
pub mod render;
pub mod stage;
pub mod svc;
pub mod sync;
pub mod tables;
pub mod topo;
mod vif_patch;

use hf_model::NbSnapshot;

pub use diag::Diagnostic;
pub use flow::{Flow, FlowId, Owner};
pub use output::SbDesired;
pub use render::RenderOptions;
pub use stage::{DpKind, Pipeline, Stage};
pub use topo::Keys;

/// What a compile needs besides NB.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Tunnel keys SB already has.
    pub keys: Keys,
    /// Feature set and layout.
    pub render: RenderOptions,
    /// Datapaths whose SB flows the sync must keep as they are (from
    /// [`features::Negotiated::apply`]); copied to [`SbDesired::frozen_datapaths`].
    pub frozen_datapaths: std::collections::BTreeSet<String>,
    /// Diagnostics found before the compile (negotiation's, about `Chassis` rows); they are
    /// returned with the compile's.
    pub extra_diagnostics: Vec<Diagnostic>,
}

/// A compile's result.
#[derive(Clone, Debug, Default)]
pub struct Compiled {
    /// What SB should hold.
    pub sb: SbDesired,
    /// One per bad NB row (and per flow that could not be written), sorted.
    pub diagnostics: Vec<Diagnostic>,
    /// Flows built before datapath grouping.
    pub flows_built: usize,
    /// NB `ACL` row → the match text in force: the next compile's `Keys::acl_last_good`
    /// (see [`ls::index`]).
    pub acl_last_good: std::collections::BTreeMap<uuid::Uuid, String>,
}

/// Compiles `nb`.
pub fn compile(nb: &NbSnapshot, opts: &Options) -> Compiled {
    let mut diags = diag::Diags::default();
    let topo = topo::Topo::build(nb, &opts.keys, opts.render.features, &mut diags);
    // One datapath's typed flows at a time: rendered to text, then dropped.
    let mut renderer = render::Renderer::new(&opts.render);
    let mut flows_built = 0;
    let mut flows = flow::Flows::default();
    for dp in 0..topo.datapaths.len() {
        match topo.datapaths[dp].kind {
            DpKind::Switch => ls::build(&topo, dp, &mut flows, &mut diags),
            DpKind::Router => lr::build(&topo, dp, &mut flows, &mut diags),
        }
        flows_built += flows.len();
        renderer.add(&topo, &flows);
        flows.flows.clear();
    }
    let mut sb = SbDesired {
        flows: renderer.finish(&mut diags),
        ..Default::default()
    };
    tables::build(&topo, opts, &mut sb, &mut diags);
    sb.frozen_datapaths = opts.frozen_datapaths.clone();
    let mut diagnostics = diags.0;
    diagnostics.extend(opts.extra_diagnostics.iter().cloned());
    diagnostics.sort();
    diagnostics.dedup();
    Compiled {
        sb,
        diagnostics,
        flows_built,
        acl_last_good: topo.ls.acl_good,
    }
}

//! Compile output → [`SbDesired`]: where typed flows become text, identical flows of several
//! datapaths become one row with a datapath group, and identities are assigned.
//!
//! Identity rules (DESIGN "Seams"): a flow written for one datapath is identified by (stage,
//! owner, discriminator, datapath name); a flow shared by a group by (stage, owner without a
//! datapath, discriminator). When one owner-and-discriminator has different texts on
//! different datapaths, the largest set of datapaths sharing a text keeps the shared identity
//! and each other set is identified by its first datapath's name.

use std::collections::BTreeMap;

use hf_expr::ast::Expr;
use hf_expr::features::FeatureSet;

use crate::diag::Diags;
use crate::flow::{Flow, FlowId, Flows, Owner};
use crate::output::{FlowDps, FlowRow};
use crate::stage::Stage;
use crate::topo::Topo;

/// How to render.
#[derive(Clone, Debug)]
pub struct RenderOptions {
    /// The features every chassis has: flows use only these (lowered where they must be).
    pub features: FeatureSet,
}

impl Default for RenderOptions {
    fn default() -> Self {
        RenderOptions {
            features: FeatureSet::all(),
        }
    }
}

/// The group key: everything but the datapath.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Shape {
    stage: Stage,
    owner: Owner,
    disc: String,
    priority: u16,
    match_: String,
    actions: String,
    hint: Option<uuid::Uuid>,
    meter: Option<String>,
}

/// (stage, owner, discriminator): what an identity is made of.
type IdentityKey = (Stage, Owner, String);

fn shared_owner(o: &Owner) -> Owner {
    match o {
        Owner::Datapath(_) => Owner::Shared,
        o => o.clone(),
    }
}

/// Renders the flows. Flows whose text cannot be lowered to `opts.features` are reported in
/// `diags` and left out (the caller decides what fails closed means for them).
pub fn flows(
    topo: &Topo<'_>,
    flows: &Flows,
    opts: &RenderOptions,
    diags: &mut Diags,
) -> BTreeMap<FlowId, FlowRow> {
    let group = opts.features.contains("logical-dp-groups");
    // Shape → datapath indices.
    let mut shapes: BTreeMap<Shape, Vec<usize>> = BTreeMap::new();
    for fl in &flows.flows {
        let Some((m, a)) = text(fl, &opts.features, topo, diags) else {
            continue;
        };
        let shape = Shape {
            stage: fl.stage,
            owner: if group {
                shared_owner(&fl.owner)
            } else {
                fl.owner.clone()
            },
            disc: fl.disc.clone(),
            priority: fl.priority,
            match_: m,
            actions: a,
            hint: fl.hint,
            meter: fl.meter.clone(),
        };
        shapes.entry(shape).or_default().push(fl.dp);
    }
    // (stage, owner, disc) → the shapes that share it, for identity assignment.
    let mut by_identity: BTreeMap<IdentityKey, Vec<(Shape, Vec<usize>)>> = BTreeMap::new();
    for (shape, mut dps) in shapes {
        dps.sort_unstable();
        dps.dedup();
        by_identity
            .entry((shape.stage, shape.owner.clone(), shape.disc.clone()))
            .or_default()
            .push((shape, dps));
    }
    let mut out = BTreeMap::new();
    for ((stage, owner, disc), mut variants) in by_identity {
        // Largest first; ties by first datapath name.
        let name = |d: usize| topo.datapaths[d].name.as_str();
        variants.sort_by(|a, b| {
            b.1.len()
                .cmp(&a.1.len())
                .then_with(|| name(a.1[0]).cmp(name(b.1[0])))
        });
        for (i, (shape, dps)) in variants.into_iter().enumerate() {
            let mut names: Vec<String> = dps.iter().map(|d| name(*d).to_string()).collect();
            names.sort();
            let (id, where_) = if group && names.len() > 1 {
                let id = if i == 0 {
                    FlowId::new(stage, &owner, &disc, None)
                } else {
                    FlowId::new(stage, &owner, &disc, Some(&names[0]))
                };
                (id, FlowDps::Group(names))
            } else {
                let mut rows = Vec::new();
                for n in names {
                    rows.push((FlowId::new(stage, &owner, &disc, Some(&n)), FlowDps::One(n)));
                }
                for (id, dps) in rows {
                    insert(&mut out, id, &shape, dps, diags);
                }
                continue;
            };
            insert(&mut out, id, &shape, where_, diags);
        }
    }
    out
}

fn insert(
    out: &mut BTreeMap<FlowId, FlowRow>,
    id: FlowId,
    shape: &Shape,
    dps: FlowDps,
    diags: &mut Diags,
) {
    let mut external_ids = BTreeMap::new();
    external_ids.insert("stage-name".to_string(), shape.stage.name().to_string());
    if let Some(h) = shape.hint {
        external_ids.insert(
            "stage-hint".to_string(),
            h.simple().to_string()[..8].to_string(),
        );
    }
    external_ids.insert("hf-flow-id".to_string(), id.to_string());
    let row = FlowRow {
        dps,
        pipeline: shape.stage.pipeline().name(),
        table_id: shape.stage.table(),
        priority: shape.priority,
        match_: shape.match_.clone(),
        actions: shape.actions.clone(),
        external_ids,
        controller_meter: shape.meter.clone(),
    };
    if let Some(prev) = out.insert(id, row) {
        // Two flows with one identity is a northd bug; keep the first and say so.
        let dup = out.insert(id, prev);
        diags.push(
            "Logical_Flow",
            uuid::Uuid::nil(),
            format!("{} {id}", shape.stage),
            format!(
                "two flows share identity {id} (owner {:?}, discriminator {:?}); only one is written: {:?}",
                shape.owner,
                shape.disc,
                dup.map(|d| d.match_)
            ),
        );
    }
}

/// Whether a flow enforces security: port security and ACLs. Such a flow is never left out
/// when it cannot be written for the common features: it is written as `drop;` instead.
pub fn is_security(fl: &Flow) -> bool {
    matches!(fl.owner, Owner::Acl { .. })
        || matches!(
            fl.stage,
            Stage::LsInCheckPortSec
                | Stage::LsInApplyPortSec
                | Stage::LsOutCheckPortSec
                | Stage::LsOutApplyPortSec
                | Stage::LsInAcl
                | Stage::LsOutAcl
                | Stage::LsInAclAfterLb
        )
}

/// The match and actions as text, lowered to `features` where needed. When a construct has no
/// spelling in `features`: a security flow ([`is_security`]) is written as `drop;` over a match
/// widened to what `features` can say (stricter: it drops at least what the flow matched);
/// any other flow is left out. Either way with a diagnostic.
fn text(
    fl: &Flow,
    features: &FeatureSet,
    topo: &Topo<'_>,
    diags: &mut Diags,
) -> Option<(String, String)> {
    let lowered = hf_expr::features::lower_expr(&fl.matches, features)
        .and_then(|m| hf_expr::features::lower_actions(&fl.actions, features).map(|a| (m, a)));
    match lowered {
        Ok((m, a)) => Some((m.to_string(), hf_expr::printer::actions_to_string(&a))),
        Err(e) if is_security(fl) => {
            let m = widen(&fl.matches, features, true);
            diags.push(
                "Logical_Flow",
                fl.hint.unwrap_or_default(),
                format!("{} on {}", fl.stage, topo.datapaths[fl.dp].name),
                format!(
                    "cannot be written for the chassis' common features ({e}); written as drop over `{m}` (fail closed)"
                ),
            );
            Some((
                m.to_string(),
                hf_expr::printer::actions_to_string(&[hf_expr::Action::drop()]),
            ))
        }
        Err(e) => {
            diags.push(
                "Logical_Flow",
                fl.hint.unwrap_or_default(),
                format!("{} on {}", fl.stage, topo.datapaths[fl.dp].name),
                format!("cannot be written for the chassis' common features: {e}; left out"),
            );
            None
        }
    }
}

/// `e` lowered leaf by leaf; a leaf with no spelling in `features` becomes `1` where it is
/// asserted and `0` where it is negated, so the result matches every packet `e` matches.
pub fn widen(e: &Expr, features: &FeatureSet, positive: bool) -> Expr {
    match e {
        Expr::Not(x) => Expr::Not(Box::new(widen(x, features, !positive))),
        Expr::And(v) => Expr::and(v.iter().map(|x| widen(x, features, positive)).collect()),
        Expr::Or(v) => Expr::or(v.iter().map(|x| widen(x, features, positive)).collect()),
        leaf => hf_expr::features::lower_expr(leaf, features).unwrap_or(Expr::Bool(positive)),
    }
}

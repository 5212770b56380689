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
pub(crate) struct Shape {
    /// (stage, owner, discriminator), shared by every shape of the identity (the incremental
    /// compiler keeps one allocation per identity).
    pub(crate) ident: std::sync::Arc<IdentityKey>,
    priority: u16,
    match_: std::sync::Arc<str>,
    actions: std::sync::Arc<str>,
    hint: Option<uuid::Uuid>,
    meter: Option<String>,
    mark: Option<crate::ls::index::AclBroken>,
}

impl Shape {
    /// What its identity is made of.
    pub(crate) fn identity(&self) -> IdentityKey {
        (*self.ident).clone()
    }

    /// The same shape with `ident` (equal to its own) as its identity's allocation.
    pub(crate) fn with_ident(mut self, ident: std::sync::Arc<IdentityKey>) -> Shape {
        self.ident = ident;
        self
    }

    fn stage(&self) -> Stage {
        self.ident.stage
    }
}

/// What an identity is made of: the stage, and the owner's key and the discriminator as one
/// text (as [`FlowId::new`] hashes them), one allocation instead of an [`Owner`]'s strings
/// and a discriminator.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct IdentityKey {
    stage: Stage,
    /// The owner's key, `\x1e`, the discriminator.
    key: Box<str>,
}

impl IdentityKey {
    pub(crate) fn new(stage: Stage, owner: &Owner, disc: &str) -> IdentityKey {
        let mut key = String::with_capacity(32 + disc.len());
        owner.write_key(&mut key);
        key.push('\x1e');
        key.push_str(disc);
        IdentityKey {
            stage,
            key: key.into_boxed_str(),
        }
    }

    /// The identity of its flow written for datapath `dp` (`None`: shared by a group):
    /// [`FlowId::new`] of the stage, owner and discriminator it was made from.
    pub(crate) fn flow_id(&self, dp: Option<&str>) -> FlowId {
        let sep: &[u8] = b"\x1e";
        let (dp_sep, dp) = match dp {
            Some(d) => (sep, d.as_bytes()),
            None => (&[][..], &[][..]),
        };
        FlowId(crate::flow::fnv1a64_parts([
            self.stage.pipeline().name().as_bytes(),
            sep,
            self.stage.name().as_bytes(),
            sep,
            self.key.as_bytes(),
            dp_sep,
            dp,
        ]))
    }

    /// The owner and discriminator, readable (for diagnostics).
    fn describe(&self) -> String {
        self.key.replace(['\x1e', '\x1f'], "/")
    }
}

/// The owner of a flow written for a group: a datapath's own flows are owned once.
fn shared_owner(o: &Owner) -> &Owner {
    static SHARED: Owner = Owner::Shared;
    match o {
        Owner::Datapath(_) => &SHARED,
        o => o,
    }
}

/// The `Logical_Flow.external_ids` key on the flows that stand in for an ACL whose match does
/// not parse: `last-good` (its last version that parsed) or `fail-closed` (drops what its port
/// group or switch could send or receive). `holdfast check` reads it (`acl-broken`).
pub const ACL_BROKEN_KEY: &str = "hf-acl-broken";

/// Whether flows are grouped over datapaths with `opts`.
pub(crate) fn grouping(opts: &RenderOptions) -> bool {
    opts.features.contains("logical-dp-groups")
}

/// One flow's shape (its text, lowered to `opts.features`), `None` when it is left out
/// (reported through `lowered`).
fn shape_of(
    fl: &Flow,
    opts: &RenderOptions,
    group: bool,
    topo: &Topo<'_>,
    lowered: &mut Lowered,
) -> Option<Shape> {
    let (m, a) = text(fl, &opts.features, topo, lowered)?;
    Some(Shape {
        ident: std::sync::Arc::new(if group {
            IdentityKey::new(fl.stage, shared_owner(&fl.owner), &fl.disc)
        } else {
            IdentityKey::new(fl.stage, &fl.owner, &fl.disc)
        }),
        priority: fl.priority,
        match_: m.into(),
        actions: a.into(),
        hint: fl.hint,
        meter: fl.meter.clone(),
        mark: fl.mark,
    })
}

/// The shapes of flows built with every feature (nothing to lower, nothing reported), for the
/// incremental compiler ([`crate::incremental`]).
pub(crate) fn shapes_all_features(flows: &Flows, topo: &Topo<'_>) -> Vec<Shape> {
    let opts = RenderOptions::default();
    let mut lowered = Lowered::default();
    flows
        .flows
        .iter()
        .filter_map(|fl| shape_of(fl, &opts, true, topo, &mut lowered))
        .collect()
}

/// Renders the flows. Flows whose text cannot be lowered to `opts.features` are reported in
/// `diags` and left out (the caller decides what fails closed means for them).
pub fn flows(
    topo: &Topo<'_>,
    flows: &Flows,
    opts: &RenderOptions,
    diags: &mut Diags,
) -> BTreeMap<FlowId, FlowRow> {
    let mut r = Renderer::new(opts);
    r.add(topo, flows);
    r.finish(diags)
}

/// Renders flows a datapath at a time: each [`Renderer::add`] turns a batch of typed flows
/// into shapes (their text), so a compile holds one datapath's typed flows at a time, never
/// every datapath's. [`Renderer::finish`] groups and assigns identities as [`flows`] does.
#[derive(Debug)]
pub struct Renderer<'t> {
    opts: RenderOptions,
    group: bool,
    /// Shape → datapath names.
    shapes: BTreeMap<Shape, Vec<&'t str>>,
    lowered: Lowered,
}

impl<'t> Renderer<'t> {
    /// A renderer for `opts`.
    pub fn new(opts: &RenderOptions) -> Renderer<'t> {
        Renderer {
            opts: opts.clone(),
            group: grouping(opts),
            shapes: BTreeMap::new(),
            lowered: Lowered::default(),
        }
    }

    /// Adds `flows` (of any datapaths of `topo`).
    pub fn add(&mut self, topo: &'t Topo<'_>, flows: &Flows) {
        for fl in &flows.flows {
            let Some(shape) = shape_of(fl, &self.opts, self.group, topo, &mut self.lowered) else {
                continue;
            };
            self.shapes
                .entry(shape)
                .or_default()
                .push(topo.datapaths[fl.dp].name.as_str());
        }
    }

    /// The rows of every flow added; lowering's and identity clashes' diagnostics go to
    /// `diags`.
    pub fn finish(self, diags: &mut Diags) -> BTreeMap<FlowId, FlowRow> {
        let Renderer {
            group,
            shapes,
            lowered,
            ..
        } = self;
        lowered.report(diags);
        // (stage, owner, disc) → the shapes that share it, for identity assignment.
        let mut by_identity: BTreeMap<IdentityKey, Vec<(&Shape, Vec<&str>)>> = BTreeMap::new();
        for (shape, dps) in &shapes {
            by_identity
                .entry(shape.identity())
                .or_default()
                .push((shape, dps.clone()));
        }
        let mut out = BTreeMap::new();
        for (key, variants) in by_identity {
            for (id, row) in identity_rows(&key, variants, group, diags) {
                out.insert(id, row);
            }
        }
        out
    }
}

/// The rows of one identity: `variants` are its shapes with the names of the datapaths that
/// have each (in any order, repeats allowed). The largest set of datapaths sharing a shape
/// keeps the shared identity (ties: the set whose first name sorts first); the others are
/// identified by their first datapath's name. Two rows with one identity are reported in
/// `diags` and only the first is kept.
pub(crate) fn identity_rows(
    key: &IdentityKey,
    variants: Vec<(&Shape, Vec<&str>)>,
    group: bool,
    diags: &mut Diags,
) -> BTreeMap<FlowId, FlowRow> {
    let mut variants: Vec<(&Shape, Vec<&str>)> = variants
        .into_iter()
        .map(|(s, mut names)| {
            names.sort_unstable();
            names.dedup();
            (s, names)
        })
        .filter(|(_, names)| !names.is_empty())
        .collect();
    variants.sort_by(|a, b| {
        b.1.len()
            .cmp(&a.1.len())
            .then_with(|| a.1[0].cmp(b.1[0]))
            .then_with(|| a.0.cmp(b.0))
    });
    let mut out = BTreeMap::new();
    for (i, (shape, names)) in variants.into_iter().enumerate() {
        if group && names.len() > 1 {
            let id = if i == 0 {
                key.flow_id(None)
            } else {
                key.flow_id(Some(names[0]))
            };
            let names = names.iter().map(|n| n.to_string()).collect();
            insert(&mut out, id, shape, FlowDps::Group(names), diags);
        } else {
            for n in names {
                let id = key.flow_id(Some(n));
                insert(&mut out, id, shape, FlowDps::One(n.to_string()), diags);
            }
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
    let external_ids =
        crate::output::FlowExtIds::new(shape.stage(), shape.hint.as_ref(), id, shape.mark);
    let row = FlowRow {
        dps,
        pipeline: shape.stage().pipeline().name(),
        table_id: shape.stage().table(),
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
            format!("{} {id}", shape.stage()),
            format!(
                "two flows share identity {id} (owner and discriminator {:?}); only one is written: {:?}",
                shape.ident.describe(),
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

/// What could not be written as built, aggregated: one diagnostic per (stage, what was done,
/// why), naming how many flows on which datapaths, so an old chassis does not turn every
/// datapath's copy of a flow into its own line.
#[derive(Debug, Default)]
struct Lowered {
    by: BTreeMap<(Stage, &'static str, String), LoweredAgg>,
}

#[derive(Debug, Default)]
struct LoweredAgg {
    flows: usize,
    dps: std::collections::BTreeSet<String>,
    row: uuid::Uuid,
    example: String,
}

impl Lowered {
    fn add(&mut self, fl: &Flow, topo: &Topo<'_>, done: &'static str, why: String, ex: String) {
        let a = self.by.entry((fl.stage, done, why)).or_default();
        if a.flows == 0 {
            a.row = fl.hint.unwrap_or_default();
            a.example = ex;
        }
        a.flows += 1;
        a.dps.insert(topo.datapaths[fl.dp].name.clone());
    }

    fn report(self, diags: &mut Diags) {
        for ((stage, done, why), a) in self.by {
            let mut dps: Vec<&str> = a.dps.iter().map(String::as_str).take(3).collect();
            if a.dps.len() > 3 {
                dps.push("...");
            }
            diags.push(
                "Logical_Flow",
                a.row,
                format!(
                    "{stage}: {} flow{} on {}",
                    a.flows,
                    if a.flows == 1 { "" } else { "s" },
                    dps.join(", ")
                ),
                format!(
                    "cannot be written for the chassis' common features ({why}); {done}{}",
                    if a.example.is_empty() {
                        String::new()
                    } else {
                        format!(", e.g. `{}`", a.example)
                    }
                ),
            );
        }
    }
}

/// The match and actions as text, lowered to `features` where needed ([`legacy_actions`]
/// first, then hf-expr's lowerings). When a construct has no spelling in `features`:
/// - a security flow ([`is_security`]) is written as `drop;` over a match widened to what
///   `features` can say (stricter: it drops at least what the flow matched);
/// - another flow whose actions can be written, but not its whole match, is written over the
///   match narrowed to what `features` can say (the packets only the newer construct would
///   select fall to the stage's other flows, as on a release without it); when nothing is left
///   of the match, or the actions cannot be written, the flow is left out.
///
/// Each case is reported (aggregated, [`Lowered`]).
fn text(
    fl: &Flow,
    features: &FeatureSet,
    topo: &Topo<'_>,
    lowered: &mut Lowered,
) -> Option<(String, String)> {
    // Every feature: nothing to lower or check.
    if *features == FeatureSet::all() {
        return Some((
            fl.matches.to_string(),
            hf_expr::printer::actions_to_string(&fl.actions),
        ));
    }
    let acts = if features.contains("ct-nat-in-czone") {
        hf_expr::features::lower_actions(&fl.actions, features)
    } else {
        hf_expr::features::lower_actions(&legacy_actions(&fl.actions, features), features)
    };
    let both = hf_expr::features::lower_expr(&fl.matches, features)
        .and_then(|m| acts.clone().map(|a| (m, a)));
    let e = match both {
        Ok((m, a)) => return Some((m.to_string(), hf_expr::printer::actions_to_string(&a))),
        Err(e) => e.to_string(),
    };
    if is_security(fl) {
        let m = widen(&fl.matches, features, true);
        let ms = m.to_string();
        lowered.add(
            fl,
            topo,
            "written as drop over the widened match (fail closed)",
            e,
            ms.clone(),
        );
        return Some((
            ms,
            hf_expr::printer::actions_to_string(&[hf_expr::Action::drop()]),
        ));
    }
    if let Ok(a) = acts
        && let Some(m) = narrow(&fl.matches, features)
    {
        let ms = m.to_string();
        lowered.add(fl, topo, "written over the narrower match", e, ms.clone());
        return Some((ms, hf_expr::printer::actions_to_string(&a)));
    }
    lowered.add(fl, topo, "left out", e, String::new());
    None
}

/// Older spellings northd chooses itself (hf-expr has no general lowering for them, because
/// they are only equivalent in how northd uses them): without `ct-nat-in-czone`,
/// `ct_dnat_in_czone`/`ct_snat_in_czone` become `ct_dnat`/`ct_snat` (OVN before 21.12 NATed
/// distributed gateway traffic in the separate DNAT and SNAT zones; the `flags.use_snat_zone`
/// flows that choose between the two forms then have nothing to choose and are narrowed away).
pub fn legacy_actions(actions: &[hf_expr::Action], features: &FeatureSet) -> Vec<hf_expr::Action> {
    use hf_expr::Action as A;
    use hf_expr::actions::NatKind as K;
    if features.contains("ct-nat-in-czone") {
        return actions.to_vec();
    }
    actions
        .iter()
        .map(|a| match a {
            A::CtNat { kind, target, span } => A::CtNat {
                kind: match kind {
                    K::DnatInCzone => K::Dnat,
                    K::SnatInCzone => K::Snat,
                    k => *k,
                },
                target: target.clone(),
                span: *span,
            },
            A::Nested { kind, body, span } => A::Nested {
                kind: *kind,
                body: legacy_actions(body, features),
                span: *span,
            },
            other => other.clone(),
        })
        .collect()
}

/// `e` lowered leaf by leaf; a leaf with no spelling in `features` becomes `0` where it is
/// asserted and `1` where it is negated, so the result matches only packets `e` matches.
/// `None` when nothing is left (the result would match no packet).
pub fn narrow(e: &Expr, features: &FeatureSet) -> Option<Expr> {
    match fold(subst(e, features, true)) {
        Expr::Bool(false) => None,
        m => Some(m),
    }
}

/// `e` lowered leaf by leaf; a leaf with no spelling in `features` becomes `1` where it is
/// asserted and `0` where it is negated, so the result matches every packet `e` matches.
pub fn widen(e: &Expr, features: &FeatureSet, positive: bool) -> Expr {
    fold(subst(e, features, !positive))
}

/// Replaces each leaf with no spelling in `features` by `0` (when `narrowing`) or `1` (when
/// widening) where it is asserted, and by the other where it is negated.
fn subst(e: &Expr, features: &FeatureSet, narrowing: bool) -> Expr {
    match e {
        Expr::Not(x) => Expr::Not(Box::new(subst(x, features, !narrowing))),
        Expr::And(v) => Expr::And(v.iter().map(|x| subst(x, features, narrowing)).collect()),
        Expr::Or(v) => Expr::Or(v.iter().map(|x| subst(x, features, narrowing)).collect()),
        leaf => hf_expr::features::lower_expr(leaf, features).unwrap_or(Expr::Bool(!narrowing)),
    }
}

/// Folds constants: `x && 1` is `x`, `x && 0` is `0`, `x || 0` is `x`, `x || 1` is `1`, `!0`
/// is `1`.
pub fn fold(e: Expr) -> Expr {
    match e {
        Expr::Not(x) => match fold(*x) {
            Expr::Bool(b) => Expr::Bool(!b),
            x => Expr::Not(Box::new(x)),
        },
        Expr::And(v) => {
            let mut out = Vec::new();
            for x in v.into_iter().map(fold) {
                match x {
                    Expr::Bool(true) => {}
                    Expr::Bool(false) => return Expr::Bool(false),
                    x => out.push(x),
                }
            }
            if out.is_empty() {
                Expr::Bool(true)
            } else {
                Expr::and(out)
            }
        }
        Expr::Or(v) => {
            let mut out = Vec::new();
            for x in v.into_iter().map(fold) {
                match x {
                    Expr::Bool(false) => {}
                    Expr::Bool(true) => return Expr::Bool(true),
                    x => out.push(x),
                }
            }
            if out.is_empty() {
                Expr::Bool(false)
            } else {
                Expr::or(out)
            }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hf_expr::{Level, SymbolTable, parse_match};

    fn m(s: &str) -> Expr {
        parse_match(SymbolTable::shared(), s).expect("test match parses")
    }

    #[test]
    fn identity_keys_give_the_identities_flow_ids_gave() {
        let owners = [
            Owner::Datapath("sw0".into()),
            Owner::Port("sw0-p1".into()),
            Owner::Shared,
            Owner::Nat {
                router: "lr0".into(),
                kind: "snat".into(),
                logical_ip: "10.0.0.0/24".into(),
                external_ip: "172.16.0.1".into(),
            },
            Owner::Acl {
                holder: "pg1".into(),
                direction: "to-lport".into(),
                priority: 1001,
                nb_match: "ip4 && tcp.dst == 80".into(),
            },
        ];
        for stage in [Stage::LsInAcl, Stage::LrInArpResolve] {
            for o in &owners {
                for disc in ["", "ip4", "0a:00:00:00:00:01"] {
                    let k = IdentityKey::new(stage, o, disc);
                    for dp in [None, Some("sw0"), Some("lr0")] {
                        assert_eq!(k.flow_id(dp), FlowId::new(stage, o, disc, dp));
                    }
                }
            }
        }
        // Told apart where the old key was.
        let a = IdentityKey::new(Stage::LsInAcl, &Owner::Port("a".into()), "b");
        let b = IdentityKey::new(Stage::LsInAcl, &Owner::Port("a".into()), "c");
        assert_ne!(a, b);
        assert_ne!(a.flow_id(None), b.flow_id(None));
    }

    #[test]
    fn widen_and_narrow_only_touch_what_the_features_lack() {
        let hf1 = FeatureSet::level(Level::Hf1);
        // rarp.* is hf-2: widening asserts it away, narrowing drops its disjunct.
        let e = m("eth.src == 0a:00:00:00:00:01 && (arp.op == 1 || rarp.op == 3)");
        assert_eq!(
            widen(&e, &hf1, true).to_string(),
            "eth.src == 0a:00:00:00:00:01"
        );
        assert_eq!(
            narrow(&e, &hf1).map(|x| x.to_string()).as_deref(),
            Some("eth.src == 0a:00:00:00:00:01 && arp.op == 1")
        );
        // Under negation the roles swap.
        let e = m("ip4 && !flags.use_snat_zone");
        assert_eq!(widen(&e, &hf1, true).to_string(), "ip4");
        assert_eq!(narrow(&e, &hf1), None);
        // Nothing to do: unchanged (ct_mark.* is lowered to ct_label.*, not widened).
        let e = m("ip4 && ct_mark.blocked == 1");
        assert_eq!(
            widen(&e, &hf1, true).to_string(),
            "ip4 && ct_label.blocked == 1"
        );
        assert_eq!(widen(&e, &FeatureSet::all(), true), e);
    }

    #[test]
    fn czone_nat_is_written_plain_below_ct_nat_in_czone() {
        let a = hf_expr::parse_actions(
            SymbolTable::shared(),
            "ct_snat_in_czone(172.16.0.1); ct_dnat_in_czone;",
        )
        .expect("parses");
        let hf1 = FeatureSet::level(Level::Hf1);
        assert_eq!(
            hf_expr::printer::actions_to_string(&legacy_actions(&a, &hf1)),
            "ct_snat(172.16.0.1); ct_dnat;"
        );
        assert_eq!(legacy_actions(&a, &FeatureSet::all()), a);
    }
}

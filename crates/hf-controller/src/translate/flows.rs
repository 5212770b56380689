//! `Logical_Flow` (+ `Logical_DP_Group`) → [`FlowSpec`]s; `MAC_Binding`,
//! `Static_MAC_Binding` → neighbours; `FDB` → [`hf_pipeline::FdbSpec`]s; `Load_Balancer` VIPs → [`hf_pipeline::LbVipSpec`]s.
//!
//! Each flow's text is parsed once and the result copied into every datapath it applies to
//! (its `logical_datapath`, or each member of its `logical_dp_group` that is translated). Text
//! that does not parse is kept as a flow with a parse error: [`hf_pipeline::Program::compile`]
//! reports it per flow. Rows with an impossible table, priority or pipeline are left out with a
//! diagnostic.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use hf_expr::actions::Pipeline;
use hf_model::SbSnapshot;
use hf_model::sb;
use hf_pipeline::{FdbSpec, FlowId, FlowSpec, FlowText, LbVipSpec, Neighbour};
use uuid::Uuid;

use super::par::{self, Parallelism};
use super::{Diagnostic, Translation};

/// The identity, stage name and stage hint a flow row carries.
///
/// With `external_ids:hf-flow-id` (holdfast's northd) the identity is that key. Without it
/// (real ovn-northd) it is [`FlowId::derived`]: pipeline, stage name (else table), priority
/// and match text as written, never the UUID or the `stage-hint` (a UUID prefix that an NB
/// rebuild changes). Flows of one datapath that share all of these (and differ in actions)
/// share the identity; the controller gives such flows no last good version (see
/// `docs/flow-identity.md`).
///
/// Each is one allocation per row, shared by every datapath the row's flow is copied into.
pub fn flow_identity(lf: &sb::LogicalFlow) -> (FlowId, Arc<str>, Option<Arc<str>>) {
    let stage: Arc<str> = lf
        .external_ids
        .get("stage-name")
        .map_or_else(|| Arc::from(""), |s| Arc::from(s.as_str()));
    let hint = lf
        .external_ids
        .get("stage-hint")
        .map(|s| Arc::from(s.as_str()));
    let id = match lf.external_ids.get("hf-flow-id") {
        Some(h) => FlowId::hf(h),
        None => FlowId::derived(
            if lf.pipeline == sb::LogicalFlowPipeline::Egress {
                Pipeline::Egress
            } else {
                Pipeline::Ingress
            },
            &stage,
            u8::try_from(lf.table_id).unwrap_or(u8::MAX),
            u16::try_from(lf.priority).unwrap_or(u16::MAX),
            &lf.match_,
        ),
    };
    (id, stage, hint)
}

/// One SB flow row as a [`FlowSpec`] (not yet placed in a datapath), or why it cannot be one.
pub fn flow_spec(lf: &sb::LogicalFlow) -> Result<FlowSpec, String> {
    flow_spec_with(lf, &BTreeMap::new())
}

/// Replaces every `^name` outside quoted strings by `vars[name]` (ovn-controller's lexer does
/// the same with the chassis's `Chassis_Template_Var` values); unknown names stay as written.
pub fn substitute_templates(text: &str, vars: &BTreeMap<String, String>) -> String {
    if vars.is_empty() || !text.contains('^') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.char_indices().peekable();
    let mut quoted = false;
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if quoted => {
                out.push(c);
                if let Some((_, n)) = chars.next() {
                    out.push(n);
                }
            }
            '"' => {
                quoted = !quoted;
                out.push(c);
            }
            '^' if !quoted => {
                let start = i + 1;
                let mut end = start;
                while let Some(&(j, n)) = chars.peek() {
                    if n.is_ascii_alphanumeric() || n == '_' || n == '.' {
                        end = j + n.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                let name = &text[start..end];
                match vars.get(name) {
                    Some(v) => out.push_str(v),
                    None => {
                        out.push('^');
                        out.push_str(name);
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// [`substitute_templates`] on shared text: `text` itself (no copy) when nothing is
/// substituted, so a flow's text stays the replica's allocation.
pub fn substitute_shared(text: &Arc<str>, vars: &BTreeMap<String, String>) -> Arc<str> {
    if vars.is_empty() || !text.contains('^') {
        return Arc::clone(text);
    }
    let s = substitute_templates(text, vars);
    if *s == **text {
        Arc::clone(text)
    } else {
        s.into()
    }
}

/// How a translation holds each flow's match and actions.
///
/// - [`FlowForm::Parsed`] (the default): parsed ([`FlowSpec::matches`], [`FlowSpec::actions`]),
///   with the text in [`FlowSpec::source`]; for callers that compile the translation
///   themselves (`holdfast trace`, tests).
/// - [`FlowForm::Text`]: the text only, not parsed. The controller daemon's form: it hands its
///   datapath the text ([`crate::program_msg`]), which the datapath parses, so the parse trees
///   (most of a translation's heap, copied into every datapath of a DP group) were never
///   read. Such a flow carries [`TEXT_FORM`] as its [`FlowSpec::parse_error`], so that
///   compiling a text-form translation directly reports every flow instead of running empty
///   matches; its program message is the same as the parsed form's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FlowForm {
    /// Parsed match and actions, and the text.
    #[default]
    Parsed,
    /// The text only.
    Text,
}

/// The [`FlowSpec::parse_error`] of a flow translated in [`FlowForm::Text`].
pub const TEXT_FORM: &str = "not parsed: text form (compile its program message)";

/// [`flow_spec`] with chassis template variables substituted. The identity uses the text as
/// written, so it is the same on every chassis.
pub fn flow_spec_with(
    lf: &sb::LogicalFlow,
    vars: &BTreeMap<String, String>,
) -> Result<FlowSpec, String> {
    flow_spec_form(lf, vars, FlowForm::Parsed)
}

/// [`flow_spec_with`] in the given [`FlowForm`]: the same flow but for `matches`, `actions`
/// and `parse_error` (the text form's text, identity, stage, hint, UUID, pipeline, table and
/// priority equal the parsed form's, and so does the reason a row cannot be a flow).
pub fn flow_spec_form(
    lf: &sb::LogicalFlow,
    vars: &BTreeMap<String, String>,
    form: FlowForm,
) -> Result<FlowSpec, String> {
    let pipeline = match lf.pipeline {
        sb::LogicalFlowPipeline::Ingress => Pipeline::Ingress,
        sb::LogicalFlowPipeline::Egress => Pipeline::Egress,
        ref o => {
            return Err(format!(
                "pipeline \"{}\" is neither ingress nor egress",
                o.as_str()
            ));
        }
    };
    let table = u8::try_from(lf.table_id)
        .map_err(|_| format!("table_id {} is outside 0..=255", lf.table_id))?;
    let priority = u16::try_from(lf.priority)
        .map_err(|_| format!("priority {} is outside 0..=65535", lf.priority))?;
    // The text as the replica holds it (shared), unless a template variable changed it.
    let source = FlowText {
        matches: substitute_shared(&lf.match_, vars),
        actions: substitute_shared(&lf.actions, vars),
    };
    let mut fs = match form {
        FlowForm::Parsed => FlowSpec {
            source: Some(source.clone()),
            ..FlowSpec::from_text(pipeline, table, priority, &source.matches, &source.actions)
        },
        FlowForm::Text => FlowSpec {
            pipeline,
            table,
            priority,
            matches: Arc::new(hf_expr::Expr::Bool(false)),
            actions: Arc::from([]),
            source: Some(source),
            parse_error: Some(std::borrow::Cow::Borrowed(TEXT_FORM)),
            ..FlowSpec::default()
        },
    };
    let (id, stage, hint) = flow_identity(lf);
    fs.id = id;
    fs.stage = stage;
    fs.stage_hint = hint;
    fs.sb_uuid = Some(lf.uuid.to_string().into());
    Ok(fs)
}

pub(crate) fn translate_flows(
    sb: &SbSnapshot,
    chassis: Option<&str>,
    t: &mut Translation,
    mut cache: Option<&mut super::cache::FlowCache>,
    par: Parallelism,
) {
    let vars = template_vars(sb, chassis);
    let form = cache.as_deref().map_or(FlowForm::Parsed, |c| c.form);
    if let Some(c) = cache.as_deref_mut() {
        c.begin(&vars);
    }
    // First the rows' targets (translated datapath indexes), so that a cache can tell which
    // datapaths see exactly the rows, unchanged, they saw last time.
    let lfs: Vec<&sb::LogicalFlow> = sb.logical_flow().values().collect();
    let index = &t.datapath_index;
    let rows: Vec<(&sb::LogicalFlow, Vec<usize>, Option<Diagnostic>)> = par::map(par, &lfs, |lf| {
        let (targets, missing) = flow_targets(sb, lf, index);
        (*lf, targets, missing)
    });
    drop(lfs);
    // Datapaths whose flows come whole from the cache (index → its sorted flows).
    let mut reused: BTreeMap<usize, Vec<FlowSpec>> = match cache.as_deref_mut() {
        Some(c) => c.reusable_datapaths(&rows, &t.datapath_index),
        None => BTreeMap::new(),
    };
    // What each row needs, in row order: nothing, a result at hand (kept or cached), or a
    // parse; the parses then run on `par`'s threads.
    enum Plan {
        Skip,
        Ready(Box<Result<FlowSpec, String>>),
        Parse,
    }
    let mut plans: Vec<(Plan, Vec<usize>)> = Vec::with_capacity(rows.len());
    let mut to_parse: Vec<&sb::LogicalFlow> = Vec::new();
    for (lf, targets, _) in &rows {
        if targets.is_empty() {
            plans.push((Plan::Skip, Vec::new()));
            continue;
        }
        let targets: Vec<usize> = targets
            .iter()
            .copied()
            .filter(|d| !reused.contains_key(d))
            .collect();
        let plan = match cache.as_deref_mut() {
            Some(c) if targets.is_empty() => match c.keep(lf) {
                Some(reason) => Plan::Ready(Box::new(Err(reason))),
                None => Plan::Skip,
            },
            Some(c) => match c.lookup(lf) {
                Some(r) => Plan::Ready(Box::new(r)),
                None => Plan::Parse,
            },
            None => Plan::Parse,
        };
        if matches!(plan, Plan::Parse) {
            to_parse.push(lf);
        }
        plans.push((plan, targets));
    }
    let mut parsed = par::map(par, &to_parse, |lf| flow_spec_form(lf, &vars, form)).into_iter();
    for ((lf, _, missing), (plan, targets)) in rows.into_iter().zip(plans) {
        t.diagnostics.extend(missing);
        let result = match plan {
            Plan::Skip => continue,
            Plan::Ready(r) => *r,
            Plan::Parse => {
                let Some(r) = parsed.next() else {
                    continue;
                };
                if let Some(c) = cache.as_deref_mut() {
                    c.store(lf, &r);
                }
                r
            }
        };
        match result {
            Ok(fs) => {
                let Some(last) = targets.len().checked_sub(1) else {
                    continue;
                };
                let mut fs = Some(fs);
                for (i, d) in targets.into_iter().enumerate() {
                    let Some(dp) = t.spec.datapaths.get_mut(d) else {
                        continue;
                    };
                    let f = if i == last { fs.take() } else { fs.clone() };
                    dp.flows.extend(f);
                }
            }
            Err(reason) => t.diagnostics.push(Diagnostic {
                table: "Logical_Flow",
                uuid: lf.uuid,
                reason,
            }),
        }
    }
    // A deterministic order whatever the UUIDs: pipeline, table, priority (high first), text.
    // (Reused datapaths are in that order already.)
    for (i, d) in t.spec.datapaths.iter_mut().enumerate() {
        if let Some(flows) = reused.remove(&i) {
            d.flows = flows;
        }
    }
    par::for_each_mut(par, &mut t.spec.datapaths, |d| {
        if !d.flows.is_sorted_by(|a, b| flow_order(a, b).is_le()) {
            d.flows.sort_by(flow_order);
        }
    });
}

/// The order of a datapath's flows: pipeline, table, priority (high first), identity. (Flows
/// equal in all of these keep their rows' UUID order.)
pub(crate) fn flow_order(a: &FlowSpec, b: &FlowSpec) -> std::cmp::Ordering {
    let k = |f: &FlowSpec| {
        (
            matches!(f.pipeline, Pipeline::Egress),
            f.table,
            std::cmp::Reverse(f.priority),
        )
    };
    k(a).cmp(&k(b)).then_with(|| a.id.cmp(&b.id))
}

/// The chassis's template variables (`Chassis_Template_Var`), empty without a chassis.
pub(crate) fn template_vars(sb: &SbSnapshot, chassis: Option<&str>) -> BTreeMap<String, String> {
    chassis
        .and_then(|c| sb.chassis_template_var().values().find(|v| v.chassis == c))
        .map(|v| v.variables.clone())
        .unwrap_or_default()
        .into()
}

/// The translated datapaths (indexes, sorted) a flow row goes to, and the diagnostic of a
/// missing `logical_dp_group`.
pub(crate) fn flow_targets(
    sb: &SbSnapshot,
    lf: &sb::LogicalFlow,
    index: &BTreeMap<Uuid, usize>,
) -> (Vec<usize>, Option<Diagnostic>) {
    let mut targets: Vec<usize> = Vec::new();
    let mut missing = None;
    if let Some(d) = lf.logical_datapath {
        targets.extend(index.get(&d.uuid()));
    }
    if let Some(g) = lf.logical_dp_group {
        match sb.get(g) {
            Some(g) => targets.extend(g.datapaths.iter().filter_map(|d| index.get(&d.uuid()))),
            None => {
                missing = Some(Diagnostic {
                    table: "Logical_Flow",
                    uuid: lf.uuid,
                    reason: format!("logical_dp_group {} does not exist", g.uuid()),
                })
            }
        }
    }
    targets.sort_unstable();
    targets.dedup();
    (targets, missing)
}

/// Parses `aa:bb:cc:dd:ee:ff` (surrounding blanks allowed) with the logical-flow lexer's rules.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let v = hf_expr::lexer::parse_mac(s.trim())?;
    let b = u64::try_from(v).ok()?.to_be_bytes();
    Some([b[2], b[3], b[4], b[5], b[6], b[7]])
}

pub(crate) fn translate_neighbours(sb: &SbSnapshot, t: &mut Translation) {
    let names: BTreeMap<Uuid, String> = t
        .datapath_index
        .iter()
        .filter_map(|(u, &i)| Some((*u, t.spec.datapaths.get(i)?.name.clone())))
        .collect();
    let one = |table: &'static str,
               uuid: Uuid,
               dp: Uuid,
               port: &str,
               ip: &str,
               mac: &str,
               out: &mut Vec<Neighbour>,
               diags: &mut Vec<Diagnostic>| {
        let Some(dpn) = names.get(&dp) else {
            return;
        };
        let ipv = ip.trim().parse::<IpAddr>();
        let macv = parse_mac(mac);
        match (ipv, macv) {
            (Ok(ip), Some(mac)) => out.push(Neighbour {
                datapath: dpn.clone(),
                port: port.to_string(),
                ip,
                mac,
            }),
            _ => diags.push(Diagnostic {
                table,
                uuid,
                reason: format!("\"{ip}\" at \"{mac}\" is not an IP and a MAC: left out"),
            }),
        }
    };
    // Later entries win: static bindings that yield to dynamic ones first, then dynamic ones,
    // then static bindings with override_dynamic_mac.
    let mut weak = Vec::new();
    let mut dynamic = Vec::new();
    let mut strong = Vec::new();
    let mut diags = Vec::new();
    for m in sb.static_mac_binding().values() {
        let out = if m.override_dynamic_mac {
            &mut strong
        } else {
            &mut weak
        };
        one(
            "Static_MAC_Binding",
            m.uuid,
            m.datapath.uuid(),
            &m.logical_port,
            &m.ip,
            &m.mac,
            out,
            &mut diags,
        );
    }
    for m in sb.mac_binding().values() {
        one(
            "MAC_Binding",
            m.uuid,
            m.datapath.uuid(),
            &m.logical_port,
            &m.ip,
            &m.mac,
            &mut dynamic,
            &mut diags,
        );
    }
    t.spec.neighbours.extend(weak);
    t.spec.neighbours.extend(dynamic);
    t.spec.neighbours.extend(strong);
    t.diagnostics.extend(diags);
    // FDB rows name datapath and port by tunnel key.
    for f in sb.fdb().values() {
        let Some(d) = t
            .spec
            .datapaths
            .iter()
            .find(|d| i64::from(d.tunnel_key) == f.dp_key)
        else {
            continue;
        };
        let port = d.ports.iter().find(|p| i64::from(p.key) == f.port_key);
        match (port, parse_mac(&f.mac)) {
            (Some(p), Some(mac)) => t.spec.fdb.push(FdbSpec {
                datapath: d.name.clone(),
                port: p.name.clone(),
                mac,
            }),
            _ => t.diagnostics.push(Diagnostic {
                table: "FDB",
                uuid: f.uuid,
                reason: format!(
                    "port key {} of datapath {} or MAC \"{}\" does not resolve: left out",
                    f.port_key, d.name, f.mac
                ),
            }),
        }
    }
}

/// `Load_Balancer.vips` keys (`IP`, `IP:PORT`, `[IPv6]:PORT`) per datapath the balancer applies
/// to (`datapaths` and `datapath_group`): what `ct_snat_to_vip` compares against. A template
/// load balancer's keys (`^vip:^port`, `[^vip]:^port`) are expanded with the chassis's
/// `Chassis_Template_Var` first, as ovn-controller does.
pub(crate) fn translate_lbs(sb: &SbSnapshot, chassis: Option<&str>, t: &mut Translation) {
    let vars = template_vars(sb, chassis);
    for lb in sb.load_balancer().values() {
        let template = lb.options.get("template").is_some_and(|v| v == "true");
        let proto = match lb.protocol.as_ref().map(|p| p.as_str()) {
            None | Some("tcp") => 6,
            Some("udp") => 17,
            Some("sctp") => 132,
            Some(o) => {
                t.diagnostics.push(Diagnostic {
                    table: "Load_Balancer",
                    uuid: lb.uuid,
                    reason: format!("protocol \"{o}\" is not tcp, udp or sctp: left out"),
                });
                continue;
            }
        };
        let mut dps: Vec<Uuid> = lb.datapaths.iter().map(|d| d.uuid()).collect();
        if let Some(g) = lb.datapath_group.and_then(|g| sb.get(g)) {
            dps.extend(g.datapaths.iter().map(|d| d.uuid()));
        }
        dps.sort();
        dps.dedup();
        for key in lb.vips.keys() {
            let vip = if template {
                substitute_templates(key, &vars)
            } else {
                key.clone()
            };
            let Some((ip, port)) = parse_vip(&vip) else {
                t.diagnostics.push(Diagnostic {
                    table: "Load_Balancer",
                    uuid: lb.uuid,
                    reason: if template {
                        format!(
                            "template VIP \"{key}\" expands to \"{vip}\" on this chassis, which is not IP[:PORT]: left out"
                        )
                    } else {
                        format!("VIP \"{vip}\" is not IP[:PORT]: left out")
                    },
                });
                continue;
            };
            for d in &dps {
                if let Some(dp) = t
                    .datapath_index
                    .get(d)
                    .and_then(|&i| t.spec.datapaths.get(i))
                {
                    t.spec.lb_vips.push(LbVipSpec {
                        datapath: dp.name.clone(),
                        ip,
                        port,
                        proto,
                    });
                }
            }
        }
    }
}

/// `IP`, `IP:PORT` or `[IPv6]:PORT`.
pub fn parse_vip(s: &str) -> Option<(IpAddr, u16)> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some((ip, 0));
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (ip, port) = rest.split_once("]:")?;
        return Some((ip.parse().ok()?, port.parse().ok()?));
    }
    let (ip, port) = s.rsplit_once(':')?;
    Some((
        ip.parse::<std::net::Ipv4Addr>().ok()?.into(),
        port.parse().ok()?,
    ))
}

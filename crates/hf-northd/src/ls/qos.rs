//! `ls_{in,out}_qos_mark` and `ls_{in,out}_qos_meter`: NB `QoS` rows of the switch (DSCP
//! marking, rate limiting with a meter).

use hf_expr::Action;
use hf_model::nb;

use super::Sw;
use super::act::next;
use crate::build::{always, f, num};
use crate::diag::Diags;
use crate::flow::{Flows, Owner};
use crate::stage::Stage;

/// Writes the four stages for `sw`.
pub fn build(sw: &Sw<'_, '_>, out: &mut Flows, diags: &mut Diags) {
    for stage in [
        Stage::LsInQosMark,
        Stage::LsOutQosMark,
        Stage::LsInQosMeter,
        Stage::LsOutQosMeter,
    ] {
        sw.dflt(out, stage, 0, "default", always(), vec![next()]);
    }
    let nb = sw.topo.nb;
    let Some(ls) = nb.logical_switch().get(&sw.topo.datapaths[sw.dp].nb) else {
        return;
    };
    let mut rules: Vec<&nb::Qos> = ls.qos_rules.iter().filter_map(|r| nb.get(*r)).collect();
    rules.sort_by_key(|q| q.uuid);
    for q in rules {
        let ingress = matches!(q.direction, nb::QosDirection::FromLport);
        let Ok(prio) = u16::try_from(q.priority) else {
            diags.push(
                "QoS",
                q.uuid,
                sw.name(),
                format!(
                    "priority {} is out of range; the rule is left out",
                    q.priority
                ),
            );
            continue;
        };
        let m = match hf_expr::parse_match(hf_expr::SymbolTable::shared(), &q.match_) {
            Ok(m) => m,
            Err(e) => {
                diags.push(
                    "QoS",
                    q.uuid,
                    sw.name(),
                    format!(
                        "match {:?} does not parse ({e}); the rule is left out",
                        q.match_
                    ),
                );
                continue;
            }
        };
        let owner = Owner::Acl {
            holder: sw.name().to_string(),
            direction: format!("qos {}", q.direction.as_str()),
            priority: q.priority,
            nb_match: q.match_.clone(),
        };
        for (k, v) in &q.action {
            if matches!(k, nb::QosAction::Dscp) {
                let stage = if ingress {
                    Stage::LsInQosMark
                } else {
                    Stage::LsOutQosMark
                };
                sw.owned(
                    out,
                    stage,
                    prio,
                    owner.clone(),
                    "dscp",
                    Some(q.uuid),
                    m.clone(),
                    vec![
                        Action::assign(
                            f("ip.dscp"),
                            num(u128::from(u64::try_from(*v).unwrap_or(0))),
                        ),
                        next(),
                    ],
                    None,
                );
            }
        }
        let get = |want: &str| {
            q.bandwidth
                .iter()
                .find(|(k, _)| k.as_str() == want)
                .and_then(|(_, v)| u64::try_from(*v).ok())
        };
        if let Some(rate) = get("rate").filter(|r| *r > 0) {
            let stage = if ingress {
                Stage::LsInQosMeter
            } else {
                Stage::LsOutQosMeter
            };
            sw.owned(
                out,
                stage,
                prio,
                owner.clone(),
                "meter",
                Some(q.uuid),
                m.clone(),
                vec![
                    Action::SetMeter {
                        rate,
                        burst: get("burst").filter(|b| *b > 0),
                        span: hf_expr::Span::default(),
                    },
                    next(),
                ],
                None,
            );
        }
    }
}

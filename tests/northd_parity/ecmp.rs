//! ECMP symmetric replies against real ovn-northd 23.03 (issue 21): the generated topologies'
//! ECMP route is added again with `--ecmp-symmetric-reply`; every flow of both SBs must be equal (the symmetric
//! reply flows of gateway routers in `lr_in_defrag`, `lr_in_ecmp_stateful`, `lr_in_ip_routing`,
//! `lr_in_policy` and `lr_in_arp_resolve`; none on distributed routers, where holdfast says why
//! in a diagnostic).

use super::{both, env_num, flow_set};
use crate::flows;
use crate::topo::Topology;

/// The flows, with `ct_mark.ecmp_reply_port`'s port tunnel key replaced by the port's name
/// (each northd allocates port keys its own way) and ECMP member numbers left out.
fn port_keys_named(sb: &hf_model::SbSnapshot) -> std::collections::BTreeSet<super::FlowKey> {
    let names: std::collections::BTreeMap<i64, String> = sb
        .port_binding()
        .values()
        .filter(|p| p.logical_port.starts_with("lr0-"))
        .map(|p| (p.tunnel_key, p.logical_port.clone()))
        .collect();
    flow_set(sb)
        .into_iter()
        .map(|mut k| {
            super::ecmp_member_elided(&mut k);
            for (key, name) in &names {
                for field in [&mut k.3, &mut k.4] {
                    for op in ["==", "="] {
                        let from = format!("ct_mark.ecmp_reply_port {op} {key}");
                        if field.contains(&from) {
                            *field = field
                                .replace(&from, &format!("ct_mark.ecmp_reply_port {op} <{name}>"));
                        }
                    }
                }
            }
            k
        })
        .collect()
}

#[test]
fn ecmp_symmetric_reply_matches_real_northd() {
    if !crate::common::require("northd_parity", super::TOOLS) {
        return;
    }
    let first = env_num("HF_PARITY_SEED", 9000);
    let (mut gw, mut dist, mut bad, mut flows_compared, mut symmetric) = (0, 0, Vec::new(), 0, 0);
    let mut seed = first;
    while gw < 2 || dist < 1 {
        let mut t = Topology::generate(seed, 0);
        seed += 1;
        if (t.gateway_router && gw >= 2) || (!t.gateway_router && dist >= 1) {
            continue;
        }
        // The generator's ECMP route, made symmetric (one ECMP group: OVN numbers several
        // groups and their members in hash order, which nothing compares).
        let mut made = 0;
        for c in t.nb.iter_mut() {
            if c.first().map(String::as_str) == Some("--ecmp")
                && c.get(3).map(String::as_str) == Some("203.0.113.0/24")
            {
                c[0] = "--ecmp-symmetric-reply".into();
                made += 1;
            }
        }
        assert_eq!(made, 2, "seed {}: the generator's ECMP route", t.seed);
        let (a, b, filled) = both(&t);
        let (fa, fb) = (
            port_keys_named(&flows::load_sb(&a.sb)),
            port_keys_named(&flows::load_sb(&b.sb)),
        );
        flows_compared += fa.len();
        symmetric += fa.iter().filter(|f| f.4.contains("commit_ecmp_nh")).count();
        super::flows_differ(&fa, &fb, &format!("seed {}", t.seed), &mut bad);
        let said = filled
            .diagnostics
            .iter()
            .any(|d| d.contains("ecmp_symmetric_reply"));
        if t.gateway_router {
            gw += 1;
            if said {
                bad.push(format!(
                    "seed {}: a diagnostic on a gateway router: {:?}",
                    t.seed, filled.diagnostics
                ));
            }
        } else {
            dist += 1;
            if !said {
                bad.push(format!(
                    "seed {}: no diagnostic on a distributed router",
                    t.seed
                ));
            }
        }
    }
    eprintln!(
        "ecmp symmetric reply: {gw} gateway and {dist} distributed routers, {flows_compared} flows of real ovn-northd compared ({symmetric} commit_ecmp_nh flows), {} differences",
        bad.len()
    );
    assert!(
        symmetric > 0,
        "real ovn-northd wrote no symmetric reply flow"
    );
    super::assert_no_differences(&bad);
}

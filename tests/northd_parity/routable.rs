//! Routable NAT and load balancer addresses against real ovn-northd 23.03 (issue 21):
//! generated topologies whose `dnat`/`dnat_and_snat` rules on `lr0` are made with
//! `--add-route` and whose router load balancers get `options:add_route=true`, with a second
//! router `lr1` on the external switch (a gateway router, a router with its own distributed
//! gateway port and routable NAT, or a plain distributed router in turn); every flow of both
//! SBs must be equal: the connected routes to the routable addresses in the other router's
//! `lr_in_ip_routing` and their `lr_in_arp_resolve` entries.

use std::collections::{BTreeMap, BTreeSet};

use super::{FlowKey, both, env_num, flow_set};
use crate::topo::Topology;

fn cmd(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `lr1` on the external switch, in one of three shapes.
fn second_router(shape: u64) -> Vec<Vec<String>> {
    let mut c = vec![
        cmd(&["lr-add", "lr1"]),
        cmd(&[
            "lrp-add",
            "lr1",
            "lr1-ext",
            "02:00:00:00:ff:02",
            "172.16.0.2/24",
        ]),
        cmd(&[
            "lrp-add",
            "lr1",
            "lr1-in",
            "02:00:00:00:fe:01",
            "10.99.0.1/24",
        ]),
        cmd(&["lsp-add", "ext", "ext-lr1"]),
        cmd(&["lsp-set-type", "ext-lr1", "router"]),
        cmd(&["lsp-set-addresses", "ext-lr1", "router"]),
        cmd(&["lsp-set-options", "ext-lr1", "router-port=lr1-ext"]),
    ];
    match shape % 3 {
        0 => c.push(cmd(&[
            "set",
            "logical_router",
            "lr1",
            "options:chassis=gw2",
        ])),
        1 => {
            c.push(cmd(&["lrp-set-gateway-chassis", "lr1-ext", "gw2", "20"]));
            c.push(cmd(&[
                "--add-route",
                "lr-nat-add",
                "lr1",
                "dnat_and_snat",
                "172.16.0.60",
                "10.99.0.5",
            ]));
            c.push(cmd(&[
                "--add-route",
                "lr-nat-add",
                "lr1",
                "dnat",
                "172.16.0.61",
                "10.99.0.6",
            ]));
            c.push(cmd(&[
                "lr-nat-add",
                "lr1",
                "snat",
                "172.16.0.62",
                "10.99.0.0/24",
            ]));
        }
        _ => {}
    }
    c
}

/// The flows, with what each northd numbers its own way named: the router load balancer
/// address sets (`$_rtr_lb_<router tunnel key>_ip4`) by router name, ECMP member numbers
/// (OVN's hash order) left out, and the members of sets sorted: the self-originated ARP
/// flood's MACs and the routable load balancer VIPs are ssets in ovn-northd (hash order), the
/// NAT addresses follow the NAT rows' UUID order, which differs between the two NBs.
fn normalized(sb: &hf_model::SbSnapshot) -> BTreeSet<FlowKey> {
    let keys: BTreeMap<i64, String> = sb
        .datapath_binding()
        .values()
        .filter_map(|d| Some((d.tunnel_key, d.external_ids.get("name")?.clone())))
        .collect();
    flow_set(sb)
        .into_iter()
        .map(|mut k| {
            super::ecmp_member_elided(&mut k);
            k.3 = sorted_sets(&k.3);
            for (key, name) in &keys {
                k.3 =
                    k.3.replace(&format!("$_rtr_lb_{key}_"), &format!("$_rtr_lb_<{name}>_"));
            }
            k
        })
        .collect()
}

/// `m` with the members of every `{...}` set sorted.
fn sorted_sets(m: &str) -> String {
    let mut out = String::new();
    let mut rest = m;
    while let Some(i) = rest.find('{') {
        let Some(j) = rest[i..].find('}') else { break };
        let mut v: Vec<&str> = rest[i + 1..i + j].split(", ").collect();
        v.sort_unstable();
        out.push_str(&rest[..=i]);
        out.push_str(&v.join(", "));
        rest = &rest[i + j..];
    }
    out.push_str(rest);
    out
}

#[test]
fn routable_nat_matches_real_northd() {
    if !crate::common::require("northd_parity", super::TOOLS) {
        return;
    }
    let first = env_num("HF_PARITY_SEED", 9100);
    let (mut done, mut bad, mut compared, mut routable) = (0u64, Vec::new(), 0, 0);
    let mut seed = first;
    let mut saw_gw_router = false;
    while done < 4 {
        let mut t = Topology::generate(seed, 0);
        seed += 1;
        if t.gateway_router && saw_gw_router {
            continue;
        }
        saw_gw_router |= t.gateway_router;
        let mut lr0_lbs = Vec::new();
        for c in t.nb.iter_mut() {
            let is = |c: &[String], i: usize, s: &str| c.get(i).map(String::as_str) == Some(s);
            if is(c, 0, "lr-nat-add")
                && is(c, 1, "lr0")
                && (is(c, 2, "dnat") || is(c, 2, "dnat_and_snat"))
            {
                c.insert(0, "--add-route".into());
            }
            if is(c, 0, "lr-lb-add") && is(c, 1, "lr0") {
                lr0_lbs.push(c[2].clone());
            }
        }
        for lb in &lr0_lbs {
            t.nb.push(cmd(&["set", "load_balancer", lb, "options:add_route=true"]));
        }
        t.nb.extend(second_router(done));
        let (a, b, filled) = both(&t);
        let (fa, fb) = (
            normalized(&crate::flows::load_sb(&a.sb)),
            normalized(&crate::flows::load_sb(&b.sb)),
        );
        compared += fa.len();
        routable += fa
            .iter()
            .filter(|f| {
                f.1 == "lr_in_ip_routing" && f.3.contains("/32") && f.0 != "lr0"
                    || f.1 == "lr_in_arp_resolve" && f.3.contains("reg0 == {")
            })
            .count();
        super::flows_differ(&fa, &fb, &format!("seed {}", t.seed), &mut bad);
        if let Some(d) = filled.diagnostics.iter().find(|d| d.contains("add_route")) {
            bad.push(format!("seed {}: diagnostic {d}", t.seed));
        }
        done += 1;
    }
    eprintln!(
        "routable NAT: {done} topologies, {compared} flows of real ovn-northd compared ({routable} routable routes and resolutions), {} differences",
        bad.len()
    );
    assert!(routable > 0, "no routable route in real ovn-northd's SB");
    super::assert_no_differences(&bad);
}

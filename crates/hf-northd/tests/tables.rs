//! The non-flow SB tables where real ovn-northd 23.03 is not the oracle (the root package's
//! `northd_tables_match_real_northd` compares everything it can with real ovn-northd): the
//! older layouts served to older chassis (global port groups, `Load_Balancer.datapaths`,
//! `lb_hairpin_use_ct_mark`), the stability holdfast adds where ovn-northd writes back to NB
//! (`mac_prefix`, `svc_monitor_mac`, container tags), the diagnostics of bad rows, and
//! MAC_Binding ageing.

mod common;

use common::{Nb, generator_like};
use hf_expr::features::{FeatureSet, Level};
use hf_northd::tables::mac_binding::{self, Entry};
use hf_northd::topo::Keys;
use hf_northd::{Compiled, Options, RenderOptions, compile};
use serde_json::json;
use uuid::Uuid;

fn with_features(features: FeatureSet) -> Options {
    Options {
        render: RenderOptions { features },
        ..Default::default()
    }
}

fn has_diag(c: &Compiled, name: &str, reason: &str) -> bool {
    c.diagnostics
        .iter()
        .any(|d| d.name == name && d.reason.contains(reason))
}

#[test]
fn port_groups_per_datapath_or_global_as_the_chassis_support() {
    let mut nb = Nb::new();
    let vifs = generator_like(&mut nb);
    // A second group spanning both switches.
    nb.pg("pg_both", &[vifs["sw0-vm1"], vifs["sw1-vm2"]]);
    let snap = nb.snapshot();
    let new = compile(&snap, &Options::default());
    let key = |dp: &str| new.sb.datapaths[dp].tunnel_key;
    let both: Vec<(&String, Vec<&String>)> = new
        .sb
        .port_groups
        .iter()
        .filter(|(n, _)| n.ends_with("_pg_both"))
        .map(|(n, p)| (n, p.iter().collect()))
        .collect();
    assert_eq!(
        both,
        vec![
            (
                &format!("{}_pg_both", key("sw0")),
                vec![&"sw0-vm1".to_string()]
            ),
            (
                &format!("{}_pg_both", key("sw1")),
                vec![&"sw1-vm2".to_string()]
            ),
        ]
    );
    assert!(!new.sb.port_groups.contains_key("pg_both"));
    // hf-1 chassis: one global row per NB port group, with all its ports.
    let old = compile(&snap, &with_features(FeatureSet::level(Level::Hf1)));
    assert!(
        !FeatureSet::level(Level::Hf1).contains("port-group-per-datapath"),
        "hf-1 is the older layout"
    );
    let g: Vec<&String> = old.sb.port_groups["pg_both"].iter().collect();
    assert_eq!(g, vec!["sw0-vm1", "sw1-vm2"]);
    assert!(old.sb.port_groups.keys().all(|n| !n.contains("_pg_both")));
}

#[test]
fn load_balancer_rows_follow_ls_dpg_column_and_ct_mark_features() {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    nb.lb(
        "lb-two",
        &[("10.0.0.99:80", "10.0.0.11:8080")],
        &["sw0", "sw1"],
        &[],
    );
    nb.lb(
        "lb-rtr-only",
        &[("172.16.0.99:80", "10.0.0.11:8080")],
        &[],
        &["lr0"],
    );
    let snap = nb.snapshot();
    let new = compile(&snap, &Options::default());
    let lb = &new.sb.load_balancers["lb-two"];
    assert!(lb.dp_group, "23.03 chassis get datapath_group");
    assert_eq!(lb.datapaths.iter().collect::<Vec<_>>(), vec!["sw0", "sw1"]);
    assert_eq!(
        lb.options.get("hairpin_orig_tuple").map(String::as_str),
        Some("true")
    );
    assert_eq!(lb.protocol.as_deref(), Some("tcp"));
    let id = snap
        .load_balancer()
        .values()
        .find(|l| l.name == "lb-two")
        .unwrap()
        .uuid;
    assert_eq!(lb.external_ids.get("lb_id"), Some(&id.to_string()));
    assert!(
        !new.sb.load_balancers.contains_key("lb-rtr-only"),
        "23.03 writes no SB row for a router-only load balancer"
    );
    assert!(!new.sb.sb_options.contains_key("lb_hairpin_use_ct_mark"));
    let mut older = FeatureSet::level(Level::Hf1);
    for f in FeatureSet::all().iter() {
        if f.name != "ls-dpg-column" && f.name != "ct-no-masked-label" {
            older.insert(f.name);
        }
    }
    let old = compile(&snap, &with_features(older));
    assert!(!old.sb.load_balancers["lb-two"].dp_group);
    assert_eq!(
        old.sb
            .sb_options
            .get("lb_hairpin_use_ct_mark")
            .map(String::as_str),
        Some("false")
    );
    // The router LB's reachable VIP set is named after the router's tunnel key.
    let rk = new.sb.datapaths["lr0"].tunnel_key;
    let set = &new.sb.address_sets[&format!("_rtr_lb_{rk}_ip4")];
    assert!(set.contains("172.16.0.99"), "{set:?}");
}

#[test]
fn mac_prefix_and_svc_monitor_mac_are_stable() {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    let snap = nb.snapshot();
    let a = compile(&snap, &Options::default());
    let b = compile(&snap, &Options::default());
    let (p, m) = (
        a.sb.sb_options["mac_prefix"].clone(),
        a.sb.sb_options["svc_monitor_mac"].clone(),
    );
    assert_eq!(p, b.sb.sb_options["mac_prefix"]);
    assert_eq!(m, b.sb.sb_options["svc_monitor_mac"]);
    // Locally administered, unicast.
    let first = u8::from_str_radix(&m[..2], 16).unwrap();
    assert_eq!(first & 3, 2, "{m}");
    let first = u8::from_str_radix(&p[..2], 16).unwrap();
    assert_eq!(first & 3, 2, "{p}");
    assert_eq!(
        a.sb.address_sets["svc_monitor_mac"]
            .iter()
            .collect::<Vec<_>>(),
        vec![&m]
    );
    // What SB holds is kept (a restart against an SB written by ovn-northd).
    let keys = Keys {
        sb_options: [
            ("mac_prefix".to_string(), "0a:0b:0c".to_string()),
            (
                "svc_monitor_mac".to_string(),
                "0a:00:00:00:00:99".to_string(),
            ),
        ]
        .into(),
        ..Default::default()
    };
    let kept = compile(
        &snap,
        &Options {
            keys: keys.clone(),
            ..Default::default()
        },
    );
    assert_eq!(kept.sb.sb_options["mac_prefix"], "0a:0b:0c");
    assert_eq!(kept.sb.sb_options["svc_monitor_mac"], "0a:00:00:00:00:99");
    // NB wins over both; NB's other options are copied.
    nb.global_option("mac_prefix", "2:3:4");
    nb.global_option("svc_monitor_mac", "02:00:00:00:00:42");
    nb.global_option("some_option", "x");
    let snap = nb.snapshot();
    let c = compile(
        &snap,
        &Options {
            keys,
            ..Default::default()
        },
    );
    assert_eq!(c.sb.sb_options["mac_prefix"], "02:03:04");
    assert_eq!(c.sb.sb_options["svc_monitor_mac"], "02:00:00:00:00:42");
    assert_eq!(c.sb.sb_options["some_option"], "x");
    assert_eq!(c.sb.sb_options["max_tunid"], "16711680");
    assert!(c.sb.sb_options.contains_key("northd_internal_version"));
}

#[test]
fn container_tags_allocated_kept_and_conflicts_diagnosed() {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    let ctr = |nb: &mut Nb, name: &str, req: i64| {
        nb.lsp_with(
            "sw0",
            name,
            json!({"parent_name": "sw0-vm1", "tag_request": req}),
        )
    };
    ctr(&mut nb, "c-b", 0);
    ctr(&mut nb, "c-c", 0);
    // Two explicit requests for tag 1: the first by name ("c-dup") keeps it.
    ctr(&mut nb, "c-dup", 1);
    ctr(&mut nb, "c-fixed", 1);
    let c = compile(&nb.snapshot(), &Options::default());
    let tag = |c: &Compiled, p: &str| c.sb.ports[p].tag;
    assert_eq!(tag(&c, "c-dup"), Some(1));
    assert_eq!(tag(&c, "c-b"), Some(2));
    assert_eq!(tag(&c, "c-c"), Some(3));
    assert_eq!(tag(&c, "c-fixed"), None);
    assert_eq!(c.sb.ports["c-b"].parent_port.as_deref(), Some("sw0-vm1"));
    assert!(
        has_diag(&c, "c-fixed", "already used by \"c-dup\""),
        "{:#?}",
        c.diagnostics
    );
    // A port added later whose name sorts first does not move the others: SB's tags are kept.
    ctr(&mut nb, "c-a", 0);
    let keys = Keys {
        tags: c
            .sb
            .ports
            .iter()
            .filter_map(|(n, p)| p.tag.map(|t| (n.clone(), t)))
            .collect(),
        ..Default::default()
    };
    let c2 = compile(
        &nb.snapshot(),
        &Options {
            keys,
            ..Default::default()
        },
    );
    assert_eq!(tag(&c2, "c-b"), Some(2));
    assert_eq!(tag(&c2, "c-c"), Some(3));
    assert_eq!(tag(&c2, "c-a"), Some(4));
}

#[test]
fn bad_port_rows_are_diagnosed_and_the_rest_is_written() {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    nb.lsp_with("sw0", "weird", json!({"type": "no-such-type"}));
    nb.lsp_with(
        "sw0",
        "mig",
        json!({"addresses": ["set", ["0a:00:00:00:00:77 10.0.0.77"]],
            "options": ["map", [["requested-chassis", "hv1,hv2"], ["activation-strategy", "rarp"]]]}),
    );
    let rp = nb
        .snapshot()
        .logical_switch_port()
        .values()
        .find(|p| p.name == "ext-lr0-ext")
        .map(|p| p.uuid);
    assert!(
        rp.is_some(),
        "generator_like links ext to lr0 through ext-lr0-ext"
    );
    if let Some(u) = rp {
        nb.set(
            "Logical_Switch_Port",
            u,
            "options",
            json!([
                "map",
                [
                    ["router-port", "lr0-ext"],
                    ["nat-addresses", "not-a-mac 1.2.3.4"]
                ]
            ]),
        );
    }
    let c = compile(&nb.snapshot(), &Options::default());
    assert!(
        has_diag(&c, "weird", "unknown port type"),
        "{:#?}",
        c.diagnostics
    );
    assert_eq!(c.sb.ports["weird"].type_, "");
    let mig = &c.sb.ports["mig"];
    assert_eq!(mig.requested_chassis.as_deref(), Some("hv1"));
    assert_eq!(
        mig.requested_additional_chassis.iter().collect::<Vec<_>>(),
        vec!["hv2"]
    );
    assert_eq!(
        mig.options.get("activation-strategy").map(String::as_str),
        Some("rarp")
    );
    if rp.is_some() {
        assert!(
            c.diagnostics
                .iter()
                .any(|d| d.reason.contains("options:nat-addresses")),
            "{:#?}",
            c.diagnostics
        );
    }
    // Everything else is there.
    for p in ["sw0-vm1", "sw1-vm2", "lr0-sw0", "cr-lr0-ext"] {
        assert!(c.sb.ports.contains_key(p), "{p} missing");
    }
    assert_eq!(c.sb.ports["cr-lr0-ext"].type_, "chassisredirect");
}

#[test]
fn multicast_groups_and_keys() {
    let mut nb = Nb::new();
    let vifs = generator_like(&mut nb);
    nb.set(
        "Logical_Switch_Port",
        vifs["sw0-vm2"],
        "enabled",
        json!(false),
    );
    let c = compile(&nb.snapshot(), &Options::default());
    let g = |dp: &str, n: &str| c.sb.mcgroups.get(&(dp.to_string(), n.to_string()));
    let flood = g("sw0", "_MC_flood").expect("_MC_flood");
    assert_eq!(flood.tunnel_key, 32768);
    assert!(flood.ports.contains("sw0-vm1") && flood.ports.contains("sw0-lr0-sw0"));
    assert!(
        !flood.ports.contains("sw0-vm2"),
        "disabled ports are not flooded to"
    );
    let l2 = g("sw0", "_MC_flood_l2").expect("_MC_flood_l2");
    assert_eq!(l2.tunnel_key, 32772);
    assert!(!l2.ports.contains("sw0-lr0-sw0"));
    let unknown = g("ext", "_MC_unknown").expect("_MC_unknown");
    assert_eq!(unknown.tunnel_key, 32769);
    assert_eq!(
        unknown.ports.iter().collect::<Vec<_>>(),
        vec!["ext-localnet"]
    );
    assert!(
        g("lr0", "_MC_flood").is_none(),
        "routers have no flood group"
    );
}

#[test]
fn mac_binding_ageing() {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    let lr = nb
        .snapshot()
        .logical_router()
        .values()
        .find(|r| r.name == "lr0")
        .unwrap()
        .uuid;
    let e = |n: u128, dp: &str, ts: i64| Entry {
        uuid: Uuid::from_u128(n),
        datapath: dp.to_string(),
        timestamp: ts,
    };
    let entries = vec![
        e(1, "lr0", 1_000),
        e(2, "lr0", 50_000),
        e(3, "lr0", 200_000),
        e(4, "sw0", 0),
    ];
    let all = FeatureSet::all();
    // No threshold: nothing ages.
    let r = mac_binding::age(&nb.snapshot(), &all, &entries, 100_000);
    assert_eq!(r, mac_binding::Ageing::default());
    nb.set(
        "Logical_Router",
        lr,
        "options",
        json!(["map", [["mac_binding_age_threshold", "60"]]]),
    );
    let snap = nb.snapshot();
    let r = mac_binding::age(&snap, &all, &entries, 100_000);
    assert_eq!(r.delete, vec![Uuid::from_u128(1)]);
    // Row 2 is 50 s old: due in 10 s; row 3 is in the future and skipped.
    assert_eq!(r.next_in_ms, Some(10_000));
    let r = mac_binding::age(&snap, &all, &entries, 110_000);
    assert_eq!(r.delete, vec![Uuid::from_u128(1), Uuid::from_u128(2)]);
    // Without the chassis feature nothing ages.
    let r = mac_binding::age(&snap, &FeatureSet::level(Level::Hf1), &entries, 1 << 40);
    assert!(r.delete.is_empty());
    // The removal limit caps a run and reschedules it 5 s later.
    nb.global_option("mac_binding_removal_limit", "1");
    let r = mac_binding::age(&nb.snapshot(), &all, &entries, 500_000);
    assert_eq!(r.delete, vec![Uuid::from_u128(1)]);
    assert_eq!(r.next_in_ms, Some(mac_binding::BULK_REMOVAL_DELAY_MS));
}

#[test]
fn requested_datapath_keys_win_and_bad_ones_are_diagnosed() {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    let snap = nb.snapshot();
    let c = compile(&snap, &Options::default());
    let uuid_of = |name: &str| {
        snap.logical_switch()
            .values()
            .find(|l| l.name == name)
            .unwrap()
            .uuid
    };
    // sw1 asks for sw0's current key; SB still has sw0 at that key: the request wins.
    let taken = c.sb.datapaths["sw0"].tunnel_key;
    nb.set(
        "Logical_Switch",
        uuid_of("sw1"),
        "other_config",
        json!(["map", [["requested-tnl-key", taken.to_string()]]]),
    );
    nb.set(
        "Logical_Switch",
        uuid_of("ext"),
        "other_config",
        json!(["map", [["requested-tnl-key", "zero"]]]),
    );
    let keys = Keys {
        datapaths: c
            .sb
            .datapaths
            .iter()
            .map(|(n, d)| (n.clone(), d.tunnel_key))
            .collect(),
        ..Default::default()
    };
    let c2 = compile(
        &nb.snapshot(),
        &Options {
            keys,
            ..Default::default()
        },
    );
    assert_eq!(c2.sb.datapaths["sw1"].tunnel_key, taken);
    assert_ne!(c2.sb.datapaths["sw0"].tunnel_key, taken);
    assert!(
        has_diag(&c2, "ext", "requested-tnl-key \"zero\""),
        "{:#?}",
        c2.diagnostics
    );
    let keys: std::collections::BTreeSet<u32> =
        c2.sb.datapaths.values().map(|d| d.tunnel_key).collect();
    assert_eq!(keys.len(), c2.sb.datapaths.len(), "keys stay unique");
}

#[test]
fn sync_removes_lb_hairpin_use_ct_mark_once_every_chassis_has_ct_no_masked_label() {
    use hf_northd::daemon::SbView;
    use hf_northd::sync::{SyncInput, diff_ops};
    let mut nb = Nb::new();
    generator_like(&mut nb);
    let c = compile(&nb.snapshot(), &Options::default());
    assert!(!c.sb.sb_options.contains_key("lb_hairpin_use_ct_mark"));
    let mut view = SbView::default();
    let g = hf_model::sb::SbGlobal {
        uuid: Uuid::from_u128(1),
        options: [
            ("lb_hairpin_use_ct_mark".to_string(), "false".to_string()),
            ("operator_key".to_string(), "kept".to_string()),
        ]
        .into(),
        ..Default::default()
    };
    view.sb_global.insert(g.uuid, g);
    let mut n = 100u128;
    let mut fresh = || {
        n += 1;
        Uuid::from_u128(n)
    };
    let input = SyncInput {
        desired: &c.sb,
        nb_cfg: 0,
        scope: None,
    };
    let (ops, _) = diff_ops(&input, &view, &mut fresh);
    let upd = ops
        .iter()
        .find(|o| o["table"] == "SB_Global")
        .expect("SB_Global is updated");
    let text = upd["row"]["options"].to_string();
    assert!(!text.contains("lb_hairpin_use_ct_mark"), "{text}");
    assert!(
        text.contains("operator_key"),
        "other keys are left alone: {text}"
    );
    assert!(text.contains("mac_prefix"), "{text}");
}

#[test]
fn sync_keeps_dhcp_code_tables_by_name_correcting_and_deleting_as_ovn_northd() {
    use hf_model::sb::{DhcpOptions, DhcpOptionsType, Dhcpv6Options, Dhcpv6OptionsType};
    use hf_northd::daemon::SbView;
    use hf_northd::sync::{SyncInput, diff_ops};
    let mut nb = Nb::new();
    generator_like(&mut nb);
    let c = compile(&nb.snapshot(), &Options::default());
    assert_eq!(
        c.sb.dhcp_options.len(),
        hf_northd::tables::dhcp::DHCPV4.len()
    );
    let mut view = SbView::default();
    let v4 = |u: u128, name: &str, code: i64, ty: &str| DhcpOptions {
        uuid: Uuid::from_u128(u),
        code,
        name: name.into(),
        type_: DhcpOptionsType::from_wire(ty),
    };
    // Right, wrong code, wrong type, unknown, a duplicate of a right one.
    for r in [
        v4(1, "router", 3, "ipv4"),
        v4(2, "mtu", 27, "uint16"),
        v4(3, "lease_time", 51, "uint16"),
        v4(4, "no_such_option", 200, "str"),
        v4(5, "router", 3, "ipv4"),
    ] {
        view.dhcp_options.insert(r.uuid, r);
    }
    let v6 = Dhcpv6Options {
        uuid: Uuid::from_u128(6),
        code: 99,
        name: "bogus".into(),
        type_: Dhcpv6OptionsType::from_wire("str"),
    };
    view.dhcpv6_options.insert(v6.uuid, v6);
    let mut n = 100u128;
    let mut fresh = || {
        n += 1;
        Uuid::from_u128(n)
    };
    let input = SyncInput {
        desired: &c.sb,
        nb_cfg: 0,
        scope: None,
    };
    let (ops, _) = diff_ops(&input, &view, &mut fresh);
    let of = |t: &str, op: &str| -> Vec<&serde_json::Value> {
        ops.iter()
            .filter(|o| o["table"] == t && o["op"] == op)
            .collect()
    };
    let target = |o: &serde_json::Value| o["where"][0][2][1].as_str().unwrap_or("").to_string();
    let u = |i: u128| Uuid::from_u128(i).to_string();
    let updated: Vec<String> = of("DHCP_Options", "update")
        .into_iter()
        .map(target)
        .collect();
    assert_eq!(updated.len(), 2, "{updated:?}");
    assert!(updated.contains(&u(2)) && updated.contains(&u(3)));
    let deleted: Vec<String> = of("DHCP_Options", "delete")
        .into_iter()
        .map(target)
        .collect();
    assert_eq!(deleted.len(), 2, "{deleted:?}");
    assert!(deleted.contains(&u(4)) && (deleted.contains(&u(5)) || deleted.contains(&u(1))));
    assert_eq!(
        of("DHCP_Options", "insert").len(),
        hf_northd::tables::dhcp::DHCPV4.len() - 3,
        "all but router, mtu and lease_time are inserted"
    );
    let mtu = of("DHCP_Options", "update")
        .into_iter()
        .find(|o| target(o) == u(2))
        .map(|o| o["row"].clone())
        .unwrap_or_default();
    assert_eq!(mtu["code"], 26, "{mtu}");
    assert_eq!(of("DHCPv6_Options", "delete").len(), 1);
    let v6_names: Vec<&str> = of("DHCPv6_Options", "insert")
        .into_iter()
        .filter_map(|o| o["row"]["name"].as_str())
        .collect();
    assert_eq!(
        v6_names.len(),
        4,
        "server_id, ia_addr, dns_server, domain_search"
    );
    assert!(v6_names.contains(&"ia_addr"), "{v6_names:?}");
}

/// LB health checks (issue 21): `Service_Monitor` rows for the mapped backends, the VIP's
/// flows listing only backends not offline (an unmapped one left out), the responder for the
/// monitors' source IP, diagnostics for bad mappings; and a status change (an SB input, no NB
/// change) recompiled by the incremental compiler exactly as a full compile.
#[test]
fn health_checks_plan_monitors_and_follow_their_status() {
    use hf_northd::incremental::Incremental;
    use hf_northd::svc::{SvcKey, SvcSeen};
    let mut nb = Nb::new();
    generator_like(&mut nb);
    nb.lb(
        "lb-hc",
        &[(
            "10.0.0.99:80",
            "10.0.0.11:8080,10.0.0.12:8080,10.0.1.11:8080,10.0.1.12:8080",
        )],
        &["sw0"],
        &["lr0"],
    );
    nb.txn(vec![
        json!({"op": "insert", "table": "Load_Balancer_Health_Check", "uuid-name": "hc",
            "row": {"vip": "10.0.0.99:80", "options": ["map", [["interval", "3"], ["failure_count", "2"]]]}}),
        json!({"op": "mutate", "table": "Load_Balancer", "where": [["name", "==", "lb-hc"]],
            "mutations": [["health_check", "insert", ["set", [["named-uuid", "hc"]]]],
                ["ip_port_mappings", "insert", ["map", [
                    ["10.0.0.11", "sw0-vm1:10.0.0.254"],
                    ["10.0.0.12", "sw0-vm2:10.0.0.254"],
                    ["10.0.1.11", "nosuch:10.0.1.254"]]]]]}),
    ]);
    let snap = nb.snapshot();
    let opts = Options::default();
    let c = compile(&snap, &opts);
    let mons: Vec<&SvcKey> = c.sb.service_monitors.keys().collect();
    assert_eq!(
        mons.iter()
            .map(|k| k.logical_port.as_str())
            .collect::<Vec<_>>(),
        vec!["sw0-vm1", "sw0-vm2"]
    );
    let m = &c.sb.service_monitors[mons[0]];
    assert_eq!(
        (m.src_ip.as_str(), m.src_mac.as_str()),
        ("10.0.0.254", c.sb.sb_options["svc_monitor_mac"].as_str())
    );
    assert_eq!(m.options.get("interval").map(String::as_str), Some("3"));
    assert!(has_diag(&c, "lb-hc", "no logical port \"nosuch\""));
    assert!(has_diag(
        &c,
        "lb-hc",
        "backend 10.0.1.12 has no ip_port_mappings entry"
    ));
    let lb_actions = |c: &Compiled| -> Vec<String> {
        let mut v: Vec<String> =
            c.sb.flows
                .values()
                .filter(|f| f.match_.contains("10.0.0.99") && f.actions.contains("backends="))
                .map(|f| f.actions.to_string())
                .collect();
        v.sort();
        v.dedup();
        v
    };
    for a in lb_actions(&c) {
        assert!(a.contains("backends=10.0.0.11:8080,10.0.0.12:8080)"), "{a}");
    }
    assert!(
        c.sb.flows
            .values()
            .any(|f| f.match_.contains("arp.tpa == 10.0.0.254") && f.priority == 110),
        "the monitors' source IP is answered"
    );
    // sw0-vm2's monitor goes offline in SB: incremental (no NB change) equals full.
    let mut inc = Incremental::new();
    let first = inc.update(&snap, None, &opts);
    inc.restore(first.sb);
    let mut opts2 = Options::default();
    opts2.keys.svc.insert(
        (*mons[1]).clone(),
        SvcSeen {
            status: "offline".into(),
            port_up: true,
        },
    );
    let got = inc.update(&snap, Some(&[]), &opts2);
    let want = compile(&snap, &opts2);
    assert_eq!(got.sb, want.sb);
    assert_eq!(got.diagnostics, want.diagnostics);
    for a in lb_actions(&want) {
        assert!(a.contains("backends=10.0.0.11:8080)"), "{a}");
    }
    // Online but its port is not up: northd sets it offline, and leaves it out.
    let mut opts3 = Options::default();
    opts3.keys.svc.insert(
        (*mons[1]).clone(),
        SvcSeen {
            status: "online".into(),
            port_up: false,
        },
    );
    inc.restore(got.sb);
    let got = inc.update(&snap, Some(&[]), &opts3);
    assert_eq!(got.sb, compile(&snap, &opts3).sb);
    assert!(got.sb.service_monitors[mons[1]].force_offline);
    for a in lb_actions(&got) {
        assert!(a.contains("backends=10.0.0.11:8080)"), "{a}");
    }
}

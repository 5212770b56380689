//! Bad NB content, one test per class (issue 10 "Bad NB content"): the compile reports exactly
//! one diagnostic naming the bad row (table, UUID, name, reason) and everything else is what
//! the same NB without the bad row compiles to. "Without the bad row" is the same database
//! with the row deleted (or the bad value removed) afterwards, so every other row keeps its
//! UUID; tunnel keys are pinned from the bad compile so that leaving a port out does not
//! renumber the others.

mod common;

use std::collections::BTreeSet;

use common::{Nb, generator_like};
use hf_northd::output::SbDesired;
use hf_northd::topo::Keys;
use hf_northd::{Compiled, Diagnostic, Options, compile};
use serde_json::json;
use uuid::Uuid;

/// What of the bad compile is the bad row's own contribution, to take away before comparing.
enum Strip<'a> {
    /// Nothing: the bad row is left out entirely.
    Nothing,
    /// The row's port binding, its name in groups, and flows naming it or hinting at it.
    Port(&'a str),
    /// Flows whose stage-hint is the row.
    Hinted,
    /// Flows whose stage-hint is the row, and the flows matching its external address or MAC
    /// (switches send ARP/ND and frames for a router's NAT addresses to the router, and the
    /// router answers ARP for them, whether or not the router accepts the row, as ovn-northd
    /// does).
    Nat(&'a str, &'a str),
    /// One option of one port binding (the bad value itself, copied to SB as OVN does).
    PortOption(&'a str, &'a str),
    /// One address set, on both sides (the bad row's contents replace a derived set's).
    Set(&'a str),
}

fn keys_of(c: &Compiled) -> Keys {
    Keys {
        datapaths: c
            .sb
            .datapaths
            .iter()
            .map(|(n, d)| (n.clone(), d.tunnel_key))
            .collect(),
        ports: c
            .sb
            .ports
            .iter()
            .map(|(n, p)| (n.clone(), p.tunnel_key))
            .collect(),
        sb_options: c.sb.sb_options.clone(),
        nb_rows: c
            .sb
            .datapaths
            .iter()
            .filter_map(|(n, d)| {
                ["logical-switch", "logical-router"]
                    .iter()
                    .find_map(|k| d.external_ids.get(*k).and_then(|u| u.parse().ok()))
                    .map(|u| (n.clone(), u))
            })
            .collect(),
        tags: c
            .sb
            .ports
            .iter()
            .filter_map(|(n, p)| p.tag.map(|t| (n.clone(), t)))
            .collect(),
        bound_chassis: Default::default(),
        acl_last_good: Default::default(),
        queue_ids: Default::default(),
        svc: Default::default(),
        igmp: Default::default(),
        mc_keys: Default::default(),
        bfd: Default::default(),
    }
}

fn strip(mut sb: SbDesired, how: &Strip<'_>, row: Uuid) -> SbDesired {
    let hint = row.simple().to_string()[..8].to_string();
    if matches!(how, Strip::Port(_) | Strip::Hinted | Strip::Nat(..)) {
        sb.flows
            .retain(|_, f| f.external_ids.get("stage-hint") != Some(hint.as_str()));
    }
    if let Strip::Port(name) = how {
        let quoted = format!("\"{name}\"");
        sb.ports.remove(*name);
        sb.flows
            .retain(|_, f| !f.match_.contains(&quoted) && !f.actions.contains(&quoted));
        for m in sb.mcgroups.values_mut() {
            m.ports.remove(*name);
        }
        for g in sb.port_groups.values_mut() {
            g.remove(*name);
        }
    }
    if let Strip::Nat(ip, mac) = how {
        let (ip, mac) = (format!(" {ip}"), format!(" {mac}"));
        let names = |t: &str| t.contains(&ip) || (mac.len() > 1 && t.contains(&mac));
        sb.flows.retain(|_, f| !names(&f.match_));
    }
    if let Strip::PortOption(port, key) = how
        && let Some(p) = sb.ports.get_mut(*port)
    {
        p.options.remove(*key);
    }
    if let Strip::Set(name) = how {
        sb.address_sets.remove(*name);
    }
    sb
}

/// Diagnostics of `bad` that `clean` does not have.
fn new_diags<'a>(bad: &'a Compiled, clean: &Compiled) -> Vec<&'a Diagnostic> {
    let old: BTreeSet<&Diagnostic> = clean.diagnostics.iter().collect();
    bad.diagnostics
        .iter()
        .filter(|d| !old.contains(d))
        .collect()
}

/// The first difference between two SBs, readably.
fn first_difference(a: &SbDesired, b: &SbDesired) -> String {
    if a.datapaths != b.datapaths {
        return format!("datapaths:\n{:#?}\nvs\n{:#?}", a.datapaths, b.datapaths);
    }
    for (n, p) in &a.ports {
        if b.ports.get(n) != Some(p) {
            return format!("port {n}: {p:#?} vs {:#?}", b.ports.get(n));
        }
    }
    for n in b.ports.keys() {
        if !a.ports.contains_key(n) {
            return format!("port {n} only in the clean compile");
        }
    }
    for (id, f) in &a.flows {
        if b.flows.get(id) != Some(f) {
            return format!("flow {id}: {f:#?} vs {:#?}", b.flows.get(id));
        }
    }
    for (id, f) in &b.flows {
        if !a.flows.contains_key(id) {
            return format!("flow {id} only in the clean compile: {f:#?}");
        }
    }
    format!(
        "mcgroups {:?} vs {:?}; port groups {:?} vs {:?}; address sets {:?} vs {:?}; lbs {:?} vs {:?}",
        a.mcgroups,
        b.mcgroups,
        a.port_groups,
        b.port_groups,
        a.address_sets,
        b.address_sets,
        a.load_balancers.keys().collect::<Vec<_>>(),
        b.load_balancers.keys().collect::<Vec<_>>()
    )
}

/// Builds the generator-like NB, adds the bad row with `bad` (which returns its UUID), compiles,
/// fixes the NB with `fix`, compiles again, and checks the diagnostic and the rest of SB.
/// Returns the diagnostic.
fn check(
    table: &str,
    name: &str,
    reason_has: &str,
    bad: impl FnOnce(&mut Nb) -> Uuid,
    fix: impl FnOnce(&mut Nb, Uuid),
    how: Strip<'_>,
) -> Diagnostic {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    let row = bad(&mut nb);
    let c_bad = compile(&nb.snapshot(), &Options::default());
    fix(&mut nb, row);
    let c_clean = compile(
        &nb.snapshot(),
        &Options {
            keys: keys_of(&c_bad),
            ..Default::default()
        },
    );
    let new = new_diags(&c_bad, &c_clean);
    assert_eq!(
        new.len(),
        1,
        "{table} {name}: want exactly one new diagnostic, got {new:#?}"
    );
    let d = new[0].clone();
    assert_eq!(d.table, table, "{d}");
    assert_eq!(d.row, row, "{d}");
    assert_eq!(d.name, name, "{d}");
    assert!(
        d.reason.contains(reason_has),
        "{table} {name}: reason {:?} lacks {reason_has:?}",
        d.reason
    );
    // The diagnostic's text names the row for logs and `status`.
    let shown = d.to_string();
    assert!(shown.contains(table) && shown.contains(name), "{shown}");
    let rest = strip(c_bad.sb.clone(), &how, row);
    let mut clean = match how {
        Strip::Set(_) => strip(c_clean.sb.clone(), &how, row),
        _ => c_clean.sb.clone(),
    };
    if let Strip::Nat(..) = how {
        // A flow that lists the NAT's address among others is the same flow (identity) with
        // one element fewer in the clean compile: compared by being present, not by text.
        for id in c_bad
            .sb
            .flows
            .keys()
            .filter(|id| !rest.flows.contains_key(id))
        {
            clean.flows.remove(id);
        }
    }
    assert!(
        rest == clean,
        "{table} {name}: the rest of SB differs from the compile without the row: {}",
        first_difference(&rest, &clean)
    );
    assert!(!c_clean.sb.flows.is_empty());
    d
}

fn lsp_parent() -> Option<(&'static str, &'static str)> {
    Some(("Logical_Switch", "ports"))
}

fn lrp_parent() -> Option<(&'static str, &'static str)> {
    Some(("Logical_Router", "ports"))
}

#[test]
fn dangling_router_port_reference() {
    check(
        "Logical_Switch_Port",
        "sw0-ghost",
        "router-port",
        |nb| {
            nb.lsp_with(
                "sw0",
                "sw0-ghost",
                json!({"type": "router", "addresses": ["set", ["router"]],
                    "options": ["map", [["router-port", "lr0-nonexistent"]]]}),
            )
        },
        |nb, u| nb.delete("Logical_Switch_Port", u, lsp_parent()),
        Strip::Port("sw0-ghost"),
    );
}

#[test]
fn dangling_nat_logical_port() {
    check(
        "NAT",
        "dnat_and_snat 10.0.0.13 172.16.0.103",
        "logical_port",
        |nb| {
            nb.nat_with(
                "lr0",
                "dnat_and_snat",
                "172.16.0.103",
                "10.0.0.13",
                json!({"logical_port": "no-such-port", "external_mac": "0a:00:00:00:ee:09"}),
            )
        },
        |nb, u| nb.delete("NAT", u, Some(("Logical_Router", "nat"))),
        Strip::Nat("172.16.0.103", "0a:00:00:00:ee:09"),
    );
}

#[test]
fn static_route_to_unreachable_next_hop() {
    check(
        "Logical_Router_Static_Route",
        "192.168.50.0/24 via 10.99.0.1",
        "not reachable",
        |nb| nb.route("lr0", "192.168.50.0/24", "10.99.0.1"),
        |nb, u| {
            nb.delete(
                "Logical_Router_Static_Route",
                u,
                Some(("Logical_Router", "static_routes")),
            )
        },
        Strip::Hinted,
    );
}

#[test]
fn overlapping_networks_on_one_router() {
    // lr0-sw0 has 10.0.0.1/24; a later port (by name) claims 10.0.0.129/25.
    check(
        "Logical_Router_Port",
        "lr0-zz",
        "overlaps",
        |nb| {
            nb.lrp(
                "lr0",
                "lr0-zz",
                "0a:00:00:00:ff:09",
                &["10.0.0.129/25"],
                None,
            )
        },
        |nb, u| nb.delete("Logical_Router_Port", u, lrp_parent()),
        Strip::Port("lr0-zz"),
    );
}

#[test]
fn invalid_nat_external_ip() {
    check(
        "NAT",
        "snat 10.0.1.0/24 172.16.0.300",
        "external_ip",
        |nb| nb.nat("lr0", "snat", "172.16.0.300", "10.0.1.0/24"),
        |nb, u| nb.delete("NAT", u, Some(("Logical_Router", "nat"))),
        Strip::Nothing,
    );
}

#[test]
fn invalid_nat_snat_port_range_without_gateway() {
    // A distributed router with no gateway port and no options:chassis: SNAT has nowhere to
    // happen.
    check(
        "NAT",
        "snat 10.5.0.0/24 172.16.5.1",
        "gateway",
        |nb| {
            nb.ls("sw5");
            nb.lr("lr5", &[]);
            nb.link(
                "sw5",
                "lr5",
                "lr5-sw5",
                "0a:00:00:00:f5:00",
                &["10.5.0.1/24"],
            );
            nb.nat_with(
                "lr5",
                "snat",
                "172.16.5.1",
                "10.5.0.0/24",
                json!({"external_port_range": "1000-2000"}),
            )
        },
        |nb, u| nb.delete("NAT", u, Some(("Logical_Router", "nat"))),
        // As ovn-northd, the router still answers ARP for the external address (flows
        // hinted with the NAT row); no NAT flow is built.
        Strip::Hinted,
    );
}

#[test]
fn unparsable_allow_acl_match_is_left_out() {
    check(
        "ACL",
        "from-lport of sw0",
        "the ACL is left out",
        |nb| nb.acl_ls("sw0", "from-lport", 1500, "ip4 && tcp.dst == ", "allow"),
        |nb, u| nb.delete("ACL", u, Some(("Logical_Switch", "acls"))),
        Strip::Nothing,
    );
}

#[test]
fn unparsable_drop_acl_match_fails_closed() {
    // Its flows (hinted with the row) drop everything from sw0's ports; the rest is as
    // without the row.
    check(
        "ACL",
        "from-lport of sw0",
        "fails closed",
        |nb| nb.acl_ls("sw0", "from-lport", 1500, "ip4 && tcp.dst == ", "drop"),
        |nb, u| nb.delete("ACL", u, Some(("Logical_Switch", "acls"))),
        Strip::Hinted,
    );
}

#[test]
fn name_collides_with_derived_chassis_redirect_port() {
    // lr0-ext is a distributed gateway port: northd derives `cr-lr0-ext`.
    check(
        "Logical_Router_Port",
        "cr-lr0-ext",
        "derives",
        |nb| {
            nb.lrp(
                "lr0",
                "cr-lr0-ext",
                "0a:00:00:00:ff:0c",
                &["192.168.77.1/24"],
                None,
            )
        },
        |nb, u| nb.delete("Logical_Router_Port", u, lrp_parent()),
        Strip::Nothing,
    );
}

#[test]
fn address_set_collides_with_port_group_derived_set() {
    // Port group pg_web derives address sets pg_web_ip4 and pg_web_ip6. As in ovn-northd, the
    // NB row's addresses replace the derived set (reported); everything else is untouched.
    check(
        "Address_Set",
        "pg_web_ip4",
        "port group",
        |nb| nb.address_set("pg_web_ip4", &["192.0.2.1"]),
        |nb, u| nb.delete("Address_Set", u, None),
        Strip::Set("pg_web_ip4"),
    );
}

#[test]
fn duplicate_switch_name() {
    // The second row with a taken name is left out; which one is second is by UUID.
    let mut nb = Nb::new();
    generator_like(&mut nb);
    let dup = nb.ls("sw1");
    let snap = nb.snapshot();
    let first = snap
        .logical_switch()
        .values()
        .filter(|l| l.name == "sw1")
        .map(|l| l.uuid)
        .min()
        .unwrap_or_default();
    let loser = if dup == first {
        snap.logical_switch()
            .values()
            .filter(|l| l.name == "sw1" && l.uuid != first)
            .map(|l| l.uuid)
            .next()
            .unwrap_or_default()
    } else {
        dup
    };
    if loser != dup {
        // The new row sorts first and wins; the original is reported. Rest-complete then
        // compares against deleting the original, which changes what sw1 holds: only check
        // the diagnostic.
        let c = compile(&snap, &Options::default());
        let d: Vec<_> = c.diagnostics.iter().filter(|d| d.row == loser).collect();
        assert_eq!(d.len(), 1, "{:#?}", c.diagnostics);
        assert_eq!(d[0].table, "Logical_Switch");
        assert!(d[0].reason.contains("duplicate name"));
        return;
    }
    // Otherwise the usual check, with the duplicate added once more in a fresh NB.
    check(
        "Logical_Switch",
        "sw1",
        "duplicate name",
        |nb| nb.ls("sw1"),
        |nb, u| nb.delete("Logical_Switch", u, None),
        Strip::Nothing,
    );
}

#[test]
fn duplicate_requested_tunnel_key() {
    check(
        "Logical_Switch_Port",
        "sw0-vm2",
        "requested-tnl-key",
        |nb| {
            let snap = nb.snapshot();
            let find = |n: &str| {
                snap.logical_switch_port()
                    .values()
                    .find(|p| p.name == n)
                    .map(|p| p.uuid)
                    .unwrap_or_default()
            };
            let (a, b) = (find("sw0-vm1"), find("sw0-vm2"));
            for u in [a, b] {
                nb.set(
                    "Logical_Switch_Port",
                    u,
                    "options",
                    json!(["map", [["requested-tnl-key", "7"]]]),
                );
            }
            b
        },
        |nb, u| nb.set("Logical_Switch_Port", u, "options", json!(["map", []])),
        Strip::PortOption("sw0-vm2", "requested-tnl-key"),
    );
}

/// NB features holdfast northd does not implement are named, never silently ignored: each
/// gets one diagnostic, and the rest of SB is what the same NB without it compiles to.
#[test]
fn unimplemented_features_are_reported() {
    check(
        "NB_Global",
        ".",
        "IPsec",
        |nb| {
            nb.txn(vec![
                json!({"op": "update", "table": "NB_Global", "where": [],
                "row": {"ipsec": true}}),
            ]);
            nb.snapshot()
                .nb_global()
                .values()
                .next()
                .map(|g| g.uuid)
                .unwrap_or_default()
        },
        |nb, _| {
            nb.txn(vec![
                json!({"op": "update", "table": "NB_Global", "where": [],
                "row": {"ipsec": false}}),
            ]);
        },
        Strip::Nothing,
    );
}

/// Template load balancers (`options:template=true`) are built as ovn-northd 23.03 builds them
/// (flows naming the `^variable`s), and each malformed part gets its named diagnostic, once
/// (the load balancer is on a switch and a router), never silence: an `address-family` that is
/// neither `ipv4` nor `ipv6` (taken as IPv6, as 23.03 does), a VIP of three parts (23.03's
/// "Failed to initialize LB VIP"), a VIP that is neither `^variable` nor an address, and
/// backends that are neither templates nor explicit. With a good family the family's
/// diagnostic goes (the check can fail).
#[test]
fn template_load_balancers_are_built_and_malformed_parts_named() {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    nb.lb(
        "tlb",
        &[
            ("^vip:^vport", "^backends"),
            ("^a:^b:^c", "^x"),
            ("foo:80", "^y"),
            ("^v2:80", "a:b:c"),
        ],
        &["sw0"],
        &["lr0"],
    );
    let lb = nb
        .snapshot()
        .load_balancer()
        .values()
        .find(|l| l.name == "tlb")
        .map(|l| l.uuid)
        .expect("tlb");
    let set_options = |nb: &mut Nb, family: &str| {
        nb.set(
            "Load_Balancer",
            lb,
            "options",
            json!(["map", [["template", "true"], ["address-family", family]]]),
        );
    };
    set_options(&mut nb, "ip6");
    let c = compile(&nb.snapshot(), &Options::default());
    let said = |c: &Compiled, what: &str| -> usize {
        c.diagnostics
            .iter()
            .filter(|d| d.row == lb && d.reason.contains(what))
            .count()
    };
    let flows = |c: &Compiled, what: &str| -> Vec<(u8, String, String)> {
        c.sb.flows
            .values()
            .filter(|f| f.match_.contains(what) || f.actions.contains(what))
            .map(|f| (f.table_id, f.match_.to_string(), f.actions.to_string()))
            .collect()
    };
    for (what, reason) in [
        ("family", hf_northd::lb_template::BAD_FAMILY),
        ("three parts", "\"^a:^b:^c\""),
        ("neither ^variable nor address", "\"foo:80\""),
        ("bad backends", hf_northd::lb_template::BAD_BACKENDS),
    ] {
        assert_eq!(
            said(&c, reason),
            1,
            "{what}: named once: {:#?}",
            c.diagnostics
        );
    }
    // The good VIP is built, as IPv6 (the family 23.03 takes for "ip6").
    let good = flows(&c, "^vip");
    assert!(
        good.iter().any(|(_, m, a)| m.contains("ip6.dst == ^vip")
            && m.contains("tcp.dst == ^vport")
            && a.contains("ct_lb_mark(backends=^backends)")),
        "the good VIP's ls_in_lb / lr_in_dnat flows: {good:#?}"
    );
    for bad in ["^a", "foo", "^v2"] {
        assert_eq!(flows(&c, bad), Vec::new(), "no flow for {bad}");
    }
    set_options(&mut nb, "ipv6");
    let c = compile(&nb.snapshot(), &Options::default());
    assert_eq!(
        said(&c, hf_northd::lb_template::BAD_FAMILY),
        0,
        "ipv6 is a family: {:#?}",
        c.diagnostics
    );
}

/// An NB `BFD` row gets its SB row (the first free source port, a non-zero discriminator, NB's
/// status), and a static route whose session is down is left out with a diagnostic naming it.
#[test]
fn bfd_rows_are_built_and_a_down_session_takes_its_route_out() {
    let mut nb = Nb::new();
    generator_like(&mut nb);
    let row = nb.txn(vec![json!({"op": "insert", "table": "BFD",
        "row": {"logical_port": "lr0-public", "dst_ip": "172.16.0.254", "status": "down"}})]);
    nb.txn(vec![
        json!({"op": "insert", "table": "Logical_Router_Static_Route", "uuid-name": "r",
            "row": {"ip_prefix": "198.51.100.0/24", "nexthop": "172.16.0.254",
                "bfd": ["uuid", row.to_string()]}}),
        json!({"op": "mutate", "table": "Logical_Router", "where": [["name", "==", "lr0"]],
            "mutations": [["static_routes", "insert", ["set", [["named-uuid", "r"]]]]]}),
    ]);
    let c = compile(&nb.snapshot(), &Options::default());
    assert!(
        !c.diagnostics.iter().any(|d| d.reason.contains("not built")),
        "{:#?}",
        c.diagnostics
    );
    let sb = &c.sb.bfd[&("lr0-public".to_string(), "172.16.0.254".to_string())];
    assert_eq!((sb.src_port, sb.status.as_str()), (49152, "down"));
    assert!(sb.disc > 0);
    // The session is down: the route is left out, and says so.
    let said: Vec<&Diagnostic> = c
        .diagnostics
        .iter()
        .filter(|d| d.table == "Logical_Router_Static_Route")
        .collect();
    assert_eq!(said.len(), 1, "{:#?}", c.diagnostics);
    assert!(said[0].reason.contains("BFD session"), "{}", said[0]);
    assert!(
        !c.sb
            .flows
            .values()
            .any(|f| f.match_.contains("198.51.100.0/24")),
        "a route whose session is down has a flow"
    );
}

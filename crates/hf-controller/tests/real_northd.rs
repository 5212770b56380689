//! The translation on an SB written by real ovn-northd 23.03 (on real ovsdb-server) from a
//! small but varied topology: two switches behind a router with a distributed gateway port
//! (two gateway chassis), a gateway router, SNAT and a distributed floating IP, a load balancer
//! on a switch and a router, ACLs on port groups with address sets (allow-related, drop,
//! allow-stateless, reject), IPv6, and ports of every type northd writes (VIF, patch,
//! l3gateway, chassisredirect, localnet, localport, virtual, external; one VIF requested on
//! two chassis with `activation-strategy=rarp`).
#![allow(clippy::unwrap_used, clippy::disallowed_methods)]

mod common;

use common::SbOf;

use std::collections::{BTreeMap, BTreeSet};

use hf_controller::{Extra, TranslateOptions, Translation, translate, translate_with};
use hf_pipeline::{DatapathKind, PortLocation, PortSpec, Program};

fn topology(c: &common::Central) {
    let n = |args: &[&str]| {
        c.nbctl(args).unwrap();
    };
    n(&[
        "ls-add", "sw0", "--", "ls-add", "sw1", "--", "ls-add", "public", "--", "ls-add", "iso",
    ]);
    n(&[
        "lsp-add",
        "sw0",
        "vm1",
        "--",
        "lsp-set-addresses",
        "vm1",
        "00:00:00:00:00:01 10.0.0.11 fd00::11",
        "--",
        "lsp-set-port-security",
        "vm1",
        "00:00:00:00:00:01 10.0.0.11 fd00::11",
        "--",
        "lsp-set-options",
        "vm1",
        "requested-chassis=hv1",
    ]);
    n(&[
        "lsp-add",
        "sw0",
        "vm2",
        "--",
        "lsp-set-addresses",
        "vm2",
        "00:00:00:00:00:02 10.0.0.12",
        "--",
        "lsp-set-options",
        "vm2",
        "requested-chassis=hv1,hv2",
        "activation-strategy=rarp",
    ]);
    n(&[
        "lsp-add",
        "sw0",
        "lp",
        "--",
        "lsp-set-type",
        "lp",
        "localport",
        "--",
        "lsp-set-addresses",
        "lp",
        "00:00:00:00:00:09 10.0.0.9",
    ]);
    n(&[
        "lsp-add",
        "sw0",
        "vp",
        "--",
        "lsp-set-type",
        "vp",
        "virtual",
        "--",
        "lsp-set-addresses",
        "vp",
        "00:00:00:00:00:10 10.0.0.10",
        "--",
        "lsp-set-options",
        "vp",
        "virtual-ip=10.0.0.10",
        "virtual-parents=vm1,vm2",
    ]);
    n(&[
        "lsp-add",
        "sw1",
        "vm3",
        "--",
        "lsp-set-addresses",
        "vm3",
        "00:00:00:00:01:03 10.0.1.13 fd01::13",
        "--",
        "lsp-set-options",
        "vm3",
        "requested-chassis=hv2",
    ]);
    n(&[
        "lsp-add",
        "sw1",
        "ext1",
        "--",
        "lsp-set-type",
        "ext1",
        "external",
        "--",
        "lsp-set-addresses",
        "ext1",
        "00:00:00:00:01:04 10.0.1.14",
    ]);
    n(&[
        "lsp-add",
        "iso",
        "vm4",
        "--",
        "lsp-set-addresses",
        "vm4",
        "00:00:00:00:04:01 10.4.0.1",
        "--",
        "lsp-set-options",
        "vm4",
        "requested-chassis=hv4",
    ]);
    n(&[
        "lsp-add",
        "public",
        "ln",
        "--",
        "lsp-set-type",
        "ln",
        "localnet",
        "--",
        "lsp-set-addresses",
        "ln",
        "unknown",
        "--",
        "lsp-set-options",
        "ln",
        "network_name=phys",
    ]);
    // lr0: distributed router with a gateway port on hv1 (20) / hv2 (10).
    n(&["lr-add", "lr0"]);
    for (lrp, mac, nets, ls) in [
        (
            "lr0-sw0",
            "00:00:00:00:ff:01",
            "10.0.0.1/24 fd00::1/64",
            "sw0",
        ),
        (
            "lr0-sw1",
            "00:00:00:00:ff:02",
            "10.0.1.1/24 fd01::1/64",
            "sw1",
        ),
        ("lr0-public", "00:00:00:00:ff:03", "172.16.0.1/24", "public"),
    ] {
        let mut a = vec!["lrp-add", "lr0", lrp, mac];
        a.extend(nets.split(' '));
        n(&a);
        let lsp = format!("{ls}-lr0");
        n(&[
            "lsp-add",
            ls,
            &lsp,
            "--",
            "lsp-set-type",
            &lsp,
            "router",
            "--",
            "lsp-set-addresses",
            &lsp,
            "router",
            "--",
            "lsp-set-options",
            &lsp,
            &format!("router-port={lrp}"),
        ]);
    }
    n(&["lrp-set-gateway-chassis", "lr0-public", "hv1", "20"]);
    n(&["lrp-set-gateway-chassis", "lr0-public", "hv2", "10"]);
    n(&["lrp-set-gateway-chassis", "lr0-public", "hv5", "5"]);
    n(&["lr-nat-add", "lr0", "snat", "172.16.0.100", "10.0.0.0/24"]);
    n(&[
        "lr-nat-add",
        "lr0",
        "dnat_and_snat",
        "172.16.0.110",
        "10.0.0.11",
        "vm1",
        "00:00:00:00:ee:01",
    ]);
    n(&[
        "lb-add",
        "lb0",
        "10.0.0.100:80",
        "10.0.0.11:8080,10.0.0.12:8080",
        "tcp",
    ]);
    n(&["ls-lb-add", "sw0", "lb0", "--", "lr-lb-add", "lr0", "lb0"]);
    // gw: a gateway router on hv3.
    n(&[
        "lr-add",
        "gw",
        "--",
        "set",
        "logical_router",
        "gw",
        "options:chassis=hv3",
    ]);
    n(&[
        "lrp-add",
        "gw",
        "gw-public",
        "00:00:00:00:fe:01",
        "172.16.0.2/24",
    ]);
    n(&[
        "lsp-add",
        "public",
        "public-gw",
        "--",
        "lsp-set-type",
        "public-gw",
        "router",
        "--",
        "lsp-set-addresses",
        "public-gw",
        "router",
        "--",
        "lsp-set-options",
        "public-gw",
        "router-port=gw-public",
    ]);
    n(&["lr-nat-add", "gw", "snat", "172.16.0.2", "10.0.0.0/8"]);
    n(&["set", "logical_router", "gw", "options:snat-ct-zone=777"]);
    n(&["lr-route-add", "gw", "10.0.0.0/8", "172.16.0.1"]);
    n(&["lr-route-add", "lr0", "0.0.0.0/0", "172.16.0.2"]);
    // ACLs on a port group spanning two switches, with an address set.
    n(&["pg-add", "pg_web", "vm1", "vm3"]);
    n(&[
        "create",
        "Address_Set",
        "name=as_clients",
        "addresses=\"10.0.1.13\",\"10.0.0.12\"",
    ]);
    n(&[
        "acl-add",
        "pg_web",
        "to-lport",
        "1002",
        "outport == @pg_web && ip4.src == $as_clients && tcp.dst == 80",
        "allow-related",
    ]);
    n(&[
        "acl-add",
        "pg_web",
        "to-lport",
        "1001",
        "outport == @pg_web && ip4",
        "drop",
    ]);
    n(&[
        "acl-add",
        "pg_web",
        "from-lport",
        "1001",
        "inport == @pg_web && ip4",
        "allow-related",
    ]);
    n(&[
        "acl-add",
        "sw1",
        "from-lport",
        "900",
        "ip6",
        "allow-stateless",
    ]);
    n(&["acl-add", "sw1", "to-lport", "800", "udp", "reject"]);
    for (ch, ip) in [
        ("hv1", "192.168.0.1"),
        ("hv2", "192.168.0.2"),
        ("hv3", "192.168.0.3"),
        ("hv4", "192.168.0.4"),
        ("hv5", "192.168.0.5"),
    ] {
        c.sbctl(&["chassis-add", ch, "geneve", ip]).unwrap();
    }
    c.sync().unwrap();
    // Neighbours: a static binding (NB), a learned one and an FDB entry (as a controller
    // would write them to SB).
    n(&[
        "static-mac-binding-add",
        "lr0-public",
        "172.16.0.50",
        "00:00:00:00:aa:01",
    ]);
    c.sync().unwrap();
    let lr0 = c
        .sbctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "Datapath_Binding",
            "external_ids:name=lr0",
        ])
        .unwrap();
    c.sbctl(&[
        "create",
        "MAC_Binding",
        &format!("datapath={}", lr0.trim()),
        "logical_port=lr0-public",
        "ip=172.16.0.60",
        "mac=\"00:00:00:00:aa:02\"",
    ])
    .unwrap();
    let public = c
        .sbctl(&[
            "--bare",
            "--columns=tunnel_key",
            "find",
            "Datapath_Binding",
            "external_ids:name=public",
        ])
        .unwrap();
    let ln = c
        .sbctl(&[
            "--bare",
            "--columns=tunnel_key",
            "find",
            "Port_Binding",
            "logical_port=ln",
        ])
        .unwrap();
    c.sbctl(&[
        "create",
        "FDB",
        &format!("dp_key={}", public.trim()),
        &format!("port_key={}", ln.trim()),
        "mac=\"00:00:00:00:aa:03\"",
    ])
    .unwrap();
}

fn port<'a>(t: &'a Translation, name: &str) -> &'a PortSpec {
    t.spec
        .datapaths
        .iter()
        .flat_map(|d| &d.ports)
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no port {name}"))
}

fn chassis_id(t: &Translation, name: &str) -> u32 {
    t.chassis_by_name(name).unwrap().id
}

fn compile_clean(t: &Translation, what: &str) -> Program {
    let (prog, errs) = Program::compile(&t.spec).expect("no structural error");
    if !errs.is_empty() {
        let mut by_reason: BTreeMap<String, usize> = BTreeMap::new();
        for e in &errs {
            *by_reason
                .entry(format!("{}: {}", e.kind, e.message))
                .or_default() += 1;
            eprintln!("{e}");
        }
        panic!(
            "{what}: {} flows do not compile: {by_reason:#?}",
            errs.len()
        );
    }
    prog
}

#[test]
fn real_northd_sb_translates_and_compiles() {
    if !common::require(
        "real_northd_sb_translates_and_compiles",
        &[
            "ovsdb-server",
            "ovsdb-tool",
            "ovsdb-client",
            "ovn-northd",
            "ovn-nbctl",
            "ovn-sbctl",
        ],
    ) {
        return;
    }
    let c = common::Central::start().unwrap();
    topology(&c);
    let sb = c.sb_snapshot();

    // ovn-trace's view: no chassis, every port resident.
    let t = translate(&sb, &TranslateOptions { chassis: None });
    assert!(t.diagnostics.is_empty(), "{:#?}", t.diagnostics);
    let kinds: BTreeMap<&str, bool> = t
        .spec
        .datapaths
        .iter()
        .map(|d| {
            (
                d.name.as_str(),
                matches!(d.kind, DatapathKind::Router { .. }),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("gw", true),
            ("iso", false),
            ("lr0", true),
            ("public", false),
            ("sw0", false),
            ("sw1", false)
        ])
    );
    let prog = compile_clean(&t, "no chassis");
    let sb_flows: usize = sb.logical_flow().len();
    eprintln!(
        "{} SB flows -> {} compiled flows over {} datapaths",
        sb_flows,
        prog.flow_count(),
        t.spec.datapaths.len()
    );
    assert!(
        prog.flow_count() >= sb_flows,
        "datapath groups expand to every member"
    );
    // Every flow carries its identity.
    for d in &t.spec.datapaths {
        for f in &d.flows {
            assert!(
                !f.stage.is_empty() && f.sb_uuid.is_some() && !f.id.0.is_empty(),
                "{f:?}"
            );
        }
    }
    // Port types as northd wrote them, and every port resident without a chassis.
    assert!(
        matches!(port(&t, "cr-lr0-public").location, PortLocation::Redirect { ref port } if port == "lr0-public")
    );
    assert!(
        matches!(port(&t, "public-gw").location, PortLocation::Patch { ref peer } if peer == "gw-public")
    );
    assert!(
        matches!(port(&t, "sw0-lr0").location, PortLocation::Patch { ref peer } if peer == "lr0-sw0")
    );
    for p in ["vm1", "vm2", "vm3", "vm4", "lp", "vp", "ext1", "ln"] {
        assert!(
            matches!(port(&t, p).location, PortLocation::Local(_)),
            "{p}"
        );
    }
    // Per-datapath port groups became one set, and address sets parsed.
    assert_eq!(t.spec.sets.port_groups["pg_web"], ["vm1", "vm3"]);
    assert_eq!(t.spec.sets.addr_sets["as_clients"].len(), 2);
    assert_eq!(t.spec.sets.addr_sets["pg_web_ip6"].len(), 2);
    // MAC_Binding, Static_MAC_Binding and FDB rows.
    let neigh: BTreeSet<(String, String, String)> = t
        .spec
        .neighbours
        .iter()
        .map(|n| (n.datapath.clone(), n.port.clone(), n.ip.to_string()))
        .collect();
    assert!(neigh.contains(&("lr0".into(), "lr0-public".into(), "172.16.0.50".into())));
    assert!(neigh.contains(&("lr0".into(), "lr0-public".into(), "172.16.0.60".into())));
    assert!(
        t.spec
            .fdb
            .iter()
            .any(|f| f.datapath == "public" && f.port == "ln" && f.mac == [0, 0, 0, 0, 0xaa, 3])
    );
    // The load balancer's VIP on the datapaths it applies to.
    assert!(t.spec.lb_vips.iter().any(|v| v.datapath == "sw0"
        && v.port == 80
        && v.ip.to_string() == "10.0.0.100"
        && v.proto == 6));
    // Zones: distinct, never 0, and deterministic.
    let zones: BTreeSet<u16> = t.zones.values().copied().collect();
    assert_eq!(zones.len(), t.zones.len());
    assert!(!zones.contains(&0));
    assert!(t.zones.contains_key("lsp/vm1") && t.zones.contains_key("lr/lr0/snat"));
    let again = translate(&sb, &TranslateOptions { chassis: None });
    assert_eq!(again.zones, t.zones);
    let mut keep = BTreeMap::new();
    keep.insert("lsp/vm1".to_string(), 4000u16);
    let kept = translate_with(
        &sb,
        &TranslateOptions { chassis: None },
        &Extra {
            zones: keep,
            ..Extra::default()
        },
    );
    assert_eq!(port(&kept, "vm1").zone, 4000);
    // The CMS's snat-ct-zone for the gateway router, as ovn-controller honours it.
    assert_eq!(t.zones["lr/gw/snat"], 777);

    // As hv1 sees it: the gateway port is here (priority 20), vm2 starts here and also on hv2.
    let h1 = translate(
        &sb,
        &TranslateOptions {
            chassis: Some("hv1".into()),
        },
    );
    assert!(h1.diagnostics.is_empty(), "{:#?}", h1.diagnostics);
    compile_clean(&h1, "hv1");
    let (hv1, hv2, hv3) = (
        chassis_id(&h1, "hv1"),
        chassis_id(&h1, "hv2"),
        chassis_id(&h1, "hv3"),
    );
    assert_eq!(h1.chassis_by_name("hv2").unwrap().ip, "192.168.0.2");
    assert_eq!(h1.chassis_by_name("hv2").unwrap().encap_type, "geneve");
    let cr = port(&h1, "cr-lr0-public");
    assert!(matches!(cr.location, PortLocation::Redirect { .. }) && cr.resident);
    let vm2 = port(&h1, "vm2");
    assert!(matches!(vm2.location, PortLocation::Local(_)) && vm2.resident);
    assert_eq!(vm2.also_remote, [hv2]);
    assert!(vm2.activation.is_none(), "hv1 is the primary chassis");
    assert!(
        matches!(port(&h1, "vm3").location, PortLocation::Remote { chassis } if chassis == hv2)
    );
    assert!(!port(&h1, "vm3").resident);
    assert!(
        matches!(port(&h1, "public-gw").location, PortLocation::Remote { chassis } if chassis == hv3)
    );
    assert!(!port(&h1, "public-gw").resident);
    assert_eq!(
        port(&h1, "vm1").port_security,
        ["00:00:00:00:00:01 10.0.0.11 fd00::11"]
    );
    // Router flows ask about switch ports and cr- ports: resolved across datapaths.
    let lr0 = h1.spec.datapaths.iter().find(|d| d.name == "lr0").unwrap();
    let asks = |p: &str| {
        lr0.flows.iter().any(|f| {
            f.source
                .as_ref()
                .is_some_and(|s| s.matches.contains(&format!("is_chassis_resident(\"{p}\")")))
        })
    };
    assert!(asks("vm1") && asks("cr-lr0-public"));
    assert!(port(&h1, "vm1").resident);

    // As hv2: the gateway port is remote (on hv1); vm2 is here as the migration destination.
    let h2 = translate(
        &sb,
        &TranslateOptions {
            chassis: Some("hv2".into()),
        },
    );
    compile_clean(&h2, "hv2");
    let cr = port(&h2, "cr-lr0-public");
    assert!(
        matches!(cr.location, PortLocation::Remote { chassis } if chassis == hv1) && !cr.resident
    );
    let vm2 = port(&h2, "vm2");
    assert!(matches!(vm2.location, PortLocation::Local(_)));
    assert_eq!(vm2.also_remote, [hv1]);
    assert!(
        vm2.activation.is_some(),
        "activation-strategy=rarp on the additional chassis"
    );
    assert!(!port(&h2, "vm1").resident);
    assert!(
        !vm2.resident,
        "is_chassis_resident holds on the primary chassis (and an activated additional one)"
    );
    let lp = port(&h2, "lp");
    assert!(!lp.resident && matches!(lp.location, PortLocation::Local(_)));

    // As hv3: the gateway router is here; vm2 lives on both hv1 and hv2.
    let h3 = translate(
        &sb,
        &TranslateOptions {
            chassis: Some("hv3".into()),
        },
    );
    compile_clean(&h3, "hv3");
    assert!(matches!(
        port(&h3, "public-gw").location,
        PortLocation::Patch { .. }
    ));
    assert!(port(&h3, "public-gw").resident);
    let vm2 = port(&h3, "vm2");
    assert!(matches!(vm2.location, PortLocation::Remote { chassis } if chassis == hv1));
    assert_eq!(vm2.also_remote, [hv2]);

    // Which datapaths a chassis needs, and what a trace from sw0 reaches.
    let name_of =
        |u: &uuid::Uuid| hf_controller::translate::datapath_name(&sb.datapath_binding()[u]);
    let names = |s: BTreeSet<uuid::Uuid>| s.iter().map(name_of).collect::<BTreeSet<_>>();
    assert_eq!(
        names(hf_controller::needed_datapaths(&sb, "hv4")),
        BTreeSet::from(["iso".to_string()])
    );
    let all: BTreeSet<String> = ["gw", "lr0", "public", "sw0", "sw1"]
        .map(String::from)
        .into();
    // hv3 hosts the gateway router: through its l3gateway port everything is reachable.
    assert_eq!(names(hf_controller::needed_datapaths(&sb, "hv3")), all);
    // hv1 does not cross the l3gateway port of a gateway router on another chassis.
    let mut no_gw = all.clone();
    no_gw.remove("gw");
    assert_eq!(names(hf_controller::needed_datapaths(&sb, "hv1")), no_gw);
    // hv5 hosts no VIF but is a standby gateway of lr0-public: it needs lr0 and what its patch
    // ports reach, as ovn-controller adds them for every HA member.
    assert_eq!(names(hf_controller::needed_datapaths(&sb, "hv5")), no_gw);
    let sw0 = sb
        .datapath_binding()
        .values()
        .find(|d| d.external_ids.get("name").map(String::as_str) == Some("sw0"))
        .unwrap()
        .uuid;
    assert_eq!(names(hf_controller::reachable_datapaths(&sb, sw0)), all);
    // Only the needed datapaths, as ovn-controller installs them.
    let h4 = translate_with(
        &sb,
        &TranslateOptions {
            chassis: Some("hv4".into()),
        },
        &Extra {
            only_needed: true,
            ..Extra::default()
        },
    );
    assert_eq!(h4.spec.datapaths.len(), 1);
    compile_clean(&h4, "hv4");
}

//! The translation on hand-built SB rows: what real northd never writes but a database can
//! hold (bad keys, dangling peers, unsupported port types, bad addresses, bad flow text), and
//! bindings a controller has claimed (chassis, additional_chassis, activation).
// A delta is filled table by table, which reads better than one struct literal per test.
#![allow(clippy::field_reassign_with_default)]

use std::collections::BTreeMap;

use hf_controller::{TranslateOptions, translate};
use hf_model::sb::{self, Delta};
use hf_model::{RowDelta, RowRef, SbSnapshot};
use hf_pipeline::{FlowErrorKind, PortLocation, Program};
use uuid::Uuid;

fn u(n: u128) -> Uuid {
    Uuid::from_u128(n)
}

fn dp(n: u128, key: i64, name: &str, router: bool) -> sb::DatapathBinding {
    let mut ids = BTreeMap::new();
    ids.insert(
        if router {
            "logical-router"
        } else {
            "logical-switch"
        }
        .to_string(),
        u(n + 1000).to_string(),
    );
    ids.insert("name".into(), name.into());
    sb::DatapathBinding {
        uuid: u(n),
        external_ids: ids.into(),
        tunnel_key: key,
        ..Default::default()
    }
}

fn pb(n: u128, dpn: u128, name: &str, key: i64, ty: &str) -> sb::PortBinding {
    sb::PortBinding {
        uuid: u(n),
        datapath: RowRef::new(u(dpn)),
        logical_port: name.into(),
        tunnel_key: key,
        type_: ty.into(),
        ..Default::default()
    }
}

fn chassis(n: u128, name: &str) -> sb::Chassis {
    sb::Chassis {
        uuid: u(n),
        name: name.into(),
        ..Default::default()
    }
}

fn lflow(n: u128, dpn: u128, m: &str, a: &str) -> sb::LogicalFlow {
    let mut ids = BTreeMap::new();
    ids.insert("stage-name".to_string(), "ls_in_test".to_string());
    sb::LogicalFlow {
        uuid: u(n),
        logical_datapath: Some(RowRef::new(u(dpn))),
        match_: m.into(),
        actions: a.into(),
        pipeline: sb::LogicalFlowPipeline::Ingress,
        table_id: 0,
        priority: 10,
        external_ids: ids.into(),
        ..Default::default()
    }
}

fn snapshot(d: Delta) -> SbSnapshot {
    let mut s = SbSnapshot::new();
    s.apply(&d);
    s
}

#[test]
fn rows_that_do_not_translate_get_diagnostics_and_the_rest_translates() {
    let mut d = Delta::default();
    d.datapath_binding = vec![
        RowDelta::Insert(dp(1, 1, "sw", false)),
        RowDelta::Insert(dp(2, 1 << 24, "huge", false)),
        RowDelta::Insert(sb::DatapathBinding {
            uuid: u(3),
            tunnel_key: 3,
            ..Default::default()
        }),
    ];
    d.port_binding = vec![
        RowDelta::Insert(pb(10, 1, "a", 1, "")),
        RowDelta::Insert(pb(11, 1, "big", 40000, "")),
        RowDelta::Insert({
            let mut p = pb(12, 1, "dangling", 2, "patch");
            p.options.insert("peer".into(), "nowhere".into());
            p
        }),
        RowDelta::Insert(pb(13, 1, "tor", 3, "vtep")),
        RowDelta::Insert(pb(14, 1, "dup", 1, "")),
        RowDelta::Insert(pb(15, 1, "cr-nodgp", 4, "chassisredirect")),
    ];
    d.address_set = vec![RowDelta::Insert(sb::AddressSet {
        uuid: u(20),
        name: "as1".into(),
        addresses: ["10.0.0.1".to_string(), "not-an-ip".to_string()].into(),
    })];
    d.logical_flow = vec![
        RowDelta::Insert(lflow(30, 1, "inport == \"a\"", "drop;")),
        RowDelta::Insert(lflow(31, 1, "ip4 &&", "next;")),
        RowDelta::Insert({
            let mut f = lflow(32, 1, "1", "next;");
            f.table_id = 300;
            f
        }),
    ];
    let sb = snapshot(d);
    let t = translate(&sb, &TranslateOptions::default());
    let has = |table: &str, n: u128, needle: &str| {
        t.diagnostics
            .iter()
            .any(|x| x.table == table && x.uuid == u(n) && x.to_string().contains(needle))
    };
    assert!(has("Datapath_Binding", 2, "24-bit"), "{:#?}", t.diagnostics);
    assert!(has("Datapath_Binding", 3, "logical-switch"));
    assert!(has("Port_Binding", 11, "15-bit"));
    assert!(has("Port_Binding", 12, "nowhere"));
    assert!(has("Port_Binding", 13, "vtep"));
    assert!(has("Port_Binding", 14, "also used by a"));
    assert!(has("Port_Binding", 15, "no options:distributed-port"));
    assert!(has("Address_Set", 20, "not-an-ip"));
    assert!(has("Logical_Flow", 32, "table_id 300"));
    assert_eq!(t.spec.datapaths.len(), 1);
    let names: Vec<&str> = t.spec.datapaths[0]
        .ports
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["a", "dangling", "tor", "cr-nodgp"]);
    assert!(matches!(
        t.spec.datapaths[0].ports[1].location,
        PortLocation::Unbound
    ));
    assert!(matches!(
        t.spec.datapaths[0].ports[3].location,
        PortLocation::Unbound
    ));
    assert_eq!(t.spec.sets.addr_sets["as1"].len(), 1);
    // The flow whose text does not parse is a per-flow error; the program compiles.
    let (prog, errs) = Program::compile(&t.spec).expect("compiles");
    assert_eq!(prog.flow_count(), 1);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert_eq!(errs[0].kind, FlowErrorKind::Syntax);
    assert_eq!(errs[0].sb_uuid.as_deref(), Some(u(31).to_string().as_str()));
    assert_eq!(errs[0].stage, "ls_in_test");
}

#[test]
fn claimed_bindings_and_activation_follow_sb() {
    let mut d = Delta::default();
    d.chassis = vec![
        RowDelta::Insert(chassis(100, "src")),
        RowDelta::Insert(chassis(101, "dst")),
        RowDelta::Insert(chassis(102, "other")),
    ];
    d.datapath_binding = vec![RowDelta::Insert(dp(1, 7, "sw", false))];
    let mut vm = pb(10, 1, "vm", 1, "");
    vm.chassis = Some(RowRef::new(u(100)));
    vm.additional_chassis = [RowRef::new(u(101))].into();
    vm.options
        .insert("activation-strategy".into(), "rarp".into());
    d.port_binding = vec![RowDelta::Insert(vm.clone())];
    let sb = snapshot(d.clone());
    let on = |c: &str, sb: &SbSnapshot| {
        let t = translate(
            sb,
            &TranslateOptions {
                chassis: Some(c.into()),
            },
        );
        let p = t.spec.datapaths[0].ports[0].clone();
        (t, p)
    };
    let (t, p) = on("dst", &sb);
    let id = |n: &str| t.chassis_by_name(n).expect("chassis").id;
    assert!(matches!(p.location, PortLocation::Local(_)));
    assert_eq!(p.activation, Some(hf_pipeline::Activation::RARP));
    assert!(
        !p.resident,
        "an additional chassis is not the port's resident until it is activated there"
    );
    assert_eq!(p.also_remote, [id("src")]);
    let (_, p) = on("src", &sb);
    assert!(matches!(p.location, PortLocation::Local(_)) && p.activation.is_none());
    assert!(p.resident);
    assert_eq!(p.also_remote, [id("dst")]);
    let (_, p) = on("other", &sb);
    assert_eq!(p.location, PortLocation::Remote { chassis: id("src") });
    assert_eq!(p.also_remote, [id("dst")]);
    assert!(!p.resident);
    // Once activated there (SB says so), the destination no longer waits, and the port is
    // resident there (its distributed NAT follows it), and still at the source until the CMS
    // names the destination alone.
    vm.options
        .insert("additional-chassis-activated".into(), "dst".into());
    d.port_binding = vec![RowDelta::Insert(vm.clone())];
    let sb = snapshot(d.clone());
    let (t, p) = on("dst", &sb);
    assert!(p.activation.is_none());
    assert!(p.resident);
    assert_eq!(t.migrations.len(), 1);
    assert!(t.migrations[0].incoming);
    assert_eq!(t.migrations[0].peers, ["src"]);
    let (t, p) = on("src", &sb);
    assert!(p.resident);
    assert_eq!(
        (t.migrations[0].incoming, t.migrations[0].peers.clone()),
        (false, vec!["dst".to_string()])
    );
    let (_, p) = on("other", &sb);
    assert!(!p.resident);
    // A comma list of strategies (OVN 25.09); an unknown name is diagnosed, not ignored.
    vm.options.remove("additional-chassis-activated");
    vm.options
        .insert("activation-strategy".into(), "garp, na,bogus".into());
    d.port_binding = vec![RowDelta::Insert(vm)];
    let (t, p) = on("dst", &snapshot(d));
    assert_eq!(
        p.activation,
        Some(hf_pipeline::Activation {
            rarp: false,
            garp: true,
            na: true
        })
    );
    assert!(
        t.diagnostics.iter().any(|d| d.reason.contains("\"bogus\"")),
        "{:?}",
        t.diagnostics
    );
}

#[test]
fn per_datapath_port_groups_resolve_per_datapath() {
    let mut d = Delta::default();
    d.datapath_binding = vec![
        RowDelta::Insert(dp(1, 1, "a", false)),
        RowDelta::Insert(dp(2, 2, "b", false)),
    ];
    d.port_binding = vec![
        RowDelta::Insert(pb(10, 1, "a1", 1, "")),
        RowDelta::Insert(pb(11, 2, "b1", 1, "")),
    ];
    d.port_group = vec![
        RowDelta::Insert(sb::PortGroup {
            uuid: u(20),
            name: "1_pg".into(),
            ports: ["a1".to_string()].into(),
        }),
        RowDelta::Insert(sb::PortGroup {
            uuid: u(21),
            name: "2_pg".into(),
            ports: ["b1".to_string()].into(),
        }),
    ];
    d.logical_flow = vec![
        RowDelta::Insert(lflow(30, 1, "inport == @pg", "drop;")),
        RowDelta::Insert(lflow(31, 2, "inport == @pg", "drop;")),
    ];
    let t = translate(&snapshot(d), &TranslateOptions::default());
    assert!(t.diagnostics.is_empty(), "{:#?}", t.diagnostics);
    assert_eq!(t.spec.sets.port_groups["pg"], ["a1", "b1"]);
    let (_, errs) = Program::compile(&t.spec).expect("compiles");
    assert!(errs.is_empty(), "{errs:#?}");
}

#[test]
fn flow_identity_comes_from_hf_flow_id_else_pipeline_stage_priority_and_match() {
    let mut d = Delta::default();
    d.datapath_binding = vec![RowDelta::Insert(dp(1, 1, "a", false))];
    let mut with_id = lflow(30, 1, "ip4", "drop;");
    with_id
        .external_ids
        .insert("hf-flow-id".into(), "f00d".into());
    let mut hinted = lflow(31, 1, "ip6", "drop;");
    hinted
        .external_ids
        .insert("stage-hint".into(), "a0dfbb58".into());
    d.logical_flow = vec![RowDelta::Insert(with_id), RowDelta::Insert(hinted)];
    let t = translate(&snapshot(d), &TranslateOptions::default());
    let flows = &t.spec.datapaths[0].flows;
    let f30 = flows
        .iter()
        .find(|f| f.sb_uuid.as_deref() == Some(u(30).to_string().as_str()))
        .expect("flow 30");
    assert_eq!(f30.id, hf_pipeline::FlowId::hf("f00d"));
    assert_eq!(&*f30.stage, "ls_in_test");
    let f31 = flows
        .iter()
        .find(|f| f.sb_uuid.as_deref() == Some(u(31).to_string().as_str()))
        .expect("flow 31");
    assert_eq!(
        f31.id,
        hf_pipeline::FlowId::derived(
            hf_expr::actions::Pipeline::Ingress,
            "ls_in_test",
            0,
            10,
            "ip6"
        )
    );
    assert_eq!(f31.stage_hint.as_deref(), Some("a0dfbb58"));
    // An NB rebuild: another UUID and another stage-hint (the NB row's new UUID prefix); the
    // identity stays.
    let mut d = Delta::default();
    d.datapath_binding = vec![RowDelta::Insert(dp(1, 1, "a", false))];
    let mut again = lflow(99, 1, "ip6", "drop;");
    again
        .external_ids
        .insert("stage-hint".into(), "77e1c0de".into());
    d.logical_flow = vec![RowDelta::Insert(again)];
    let t2 = translate(&snapshot(d), &TranslateOptions::default());
    assert_eq!(t2.spec.datapaths[0].flows[0].id, f31.id);
    // Two flows that differ only in priority are two identities; two that differ only in
    // actions share one (they cannot be told apart: the controller keeps no last good
    // version for it, see `daemon::lastgood`).
    let mut d = Delta::default();
    d.datapath_binding = vec![RowDelta::Insert(dp(1, 1, "a", false))];
    let mut high = lflow(40, 1, "ip4", "next;");
    high.priority = 20;
    let twin = lflow(42, 1, "ip4", "drop;");
    d.logical_flow = vec![
        RowDelta::Insert(lflow(41, 1, "ip4", "next;")),
        RowDelta::Insert(high),
        RowDelta::Insert(twin),
    ];
    let t3 = translate(&snapshot(d), &TranslateOptions::default());
    let id = |n: u128| {
        t3.spec.datapaths[0]
            .flows
            .iter()
            .find(|f| f.sb_uuid.as_deref() == Some(u(n).to_string().as_str()))
            .map(|f| f.id.clone())
            .expect("flow")
    };
    assert_ne!(id(40), id(41));
    assert_eq!(id(41), id(42));
}

#[test]
fn chassis_template_variables_are_substituted_for_the_chassis() {
    let mut d = Delta::default();
    d.chassis = vec![
        RowDelta::Insert(chassis(100, "hv1")),
        RowDelta::Insert(chassis(101, "hv2")),
    ];
    d.chassis_template_var = vec![RowDelta::Insert(sb::ChassisTemplateVar {
        uuid: u(40),
        chassis: "hv1".into(),
        variables: [("vip".to_string(), "10.0.0.100".to_string())].into(),
    })];
    d.datapath_binding = vec![RowDelta::Insert(dp(1, 1, "a", false))];
    d.logical_flow = vec![RowDelta::Insert(lflow(
        30,
        1,
        "ip4.dst == ^vip || inport == \"^vip\"",
        "drop;",
    ))];
    let sb = snapshot(d);
    let t = translate(
        &sb,
        &TranslateOptions {
            chassis: Some("hv1".into()),
        },
    );
    let f = &t.spec.datapaths[0].flows[0];
    assert_eq!(
        f.source.as_ref().map(|s| &*s.matches),
        Some("ip4.dst == 10.0.0.100 || inport == \"^vip\""),
        "substituted outside strings only"
    );
    // The identity is the written text: the same on every chassis.
    let t2 = translate(
        &sb,
        &TranslateOptions {
            chassis: Some("hv2".into()),
        },
    );
    assert_eq!(t2.spec.datapaths[0].flows[0].id, f.id);
    let (_, e1) = Program::compile(&t.spec).expect("compiles");
    assert!(e1.is_empty(), "{e1:#?}");
    // hv2 defines no `vip`: the flow is a per-flow error there.
    let (_, errs) = Program::compile(&t2.spec).expect("compiles");
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(errs[0].to_string().contains("^vip"), "{}", errs[0]);
}

#[test]
fn a_requested_snat_zone_is_kept_and_zone_0_is_refused() {
    let mut d = Delta::default();
    let mut r1 = dp(1, 1, "r1", true);
    r1.external_ids.insert("snat-ct-zone".into(), "5".into());
    let mut r2 = dp(2, 2, "r2", true);
    r2.external_ids.insert("snat-ct-zone".into(), "0".into());
    d.datapath_binding = vec![RowDelta::Insert(r1), RowDelta::Insert(r2)];
    let t = translate(&snapshot(d), &TranslateOptions::default());
    assert_eq!(t.zones["lr/r1/snat"], 5);
    assert_ne!(t.zones["lr/r2/snat"], 0);
    assert!(
        t.diagnostics
            .iter()
            .any(|x| x.uuid == u(2) && x.reason.contains("zone 0")),
        "{:#?}",
        t.diagnostics
    );
    let all: std::collections::BTreeSet<u16> = t.zones.values().copied().collect();
    assert_eq!(all.len(), t.zones.len(), "distinct zones");
    assert!(matches!(
        t.spec.datapaths[0].kind,
        hf_pipeline::DatapathKind::Router { snat_zone: 5, .. }
    ));
}

/// Every zone held (by names the translation no longer has): the objects that need one get
/// none, never zone 0; each is a named `zone-exhausted` diagnostic and `unzoned` lists them
/// (the controller then keeps its running program). One zone freed: the first name gets it.
#[test]
fn exhausted_zones_are_a_named_error_never_zone_0() {
    let mut d = Delta::default();
    d.datapath_binding = vec![RowDelta::Insert(dp(1, 1, "r1", true))];
    let sb = snapshot(d);
    let mut held: BTreeMap<String, u16> = (1..=u16::MAX)
        .map(|z| (format!("lr/gone{z}/dnat"), z))
        .collect();
    let extra = hf_controller::Extra {
        only_needed: false,
        zones: held.clone(),
        local_ids: Default::default(),
        ha_up: None,
    };
    let t = hf_controller::translate_with(&sb, &TranslateOptions::default(), &extra);
    assert!(!t.zones.contains_key("lr/r1/dnat") && !t.zones.contains_key("lr/r1/snat"));
    let named: Vec<_> = t
        .diagnostics
        .iter()
        .filter(|x| {
            x.reason
                .starts_with("zone-exhausted: no conntrack zone left for lr/r1/")
        })
        .collect();
    assert_eq!(named.len(), 2, "{:#?}", t.diagnostics);
    assert_eq!(
        hf_controller::translate::zones::unzoned(&t),
        vec!["lr/r1/dnat".to_string(), "lr/r1/snat".to_string()]
    );
    held.remove("lr/gone7/dnat");
    let extra = hf_controller::Extra {
        only_needed: false,
        zones: held,
        local_ids: Default::default(),
        ha_up: None,
    };
    let t = hf_controller::translate_with(&sb, &TranslateOptions::default(), &extra);
    assert_eq!(t.zones.get("lr/r1/dnat"), Some(&7));
    assert_eq!(
        hf_controller::translate::zones::unzoned(&t),
        vec!["lr/r1/snat".to_string()]
    );
}

/// Two routers asking for the same zone: the first (by name) keeps it, the second gets a zone
/// by name and a diagnostic naming both; a name that held the requested number moves, said so.
#[test]
fn a_requested_zone_taken_twice_or_held_is_a_diagnostic() {
    let mut d = Delta::default();
    let mut r1 = dp(1, 1, "r1", true);
    r1.external_ids.insert("snat-ct-zone".into(), "9".into());
    let mut r2 = dp(2, 2, "r2", true);
    r2.external_ids.insert("snat-ct-zone".into(), "9".into());
    d.datapath_binding = vec![RowDelta::Insert(r1), RowDelta::Insert(r2)];
    let sb = snapshot(d);
    let extra = hf_controller::Extra {
        only_needed: false,
        zones: [("lr/r1/dnat".to_string(), 9)].into(),
        local_ids: Default::default(),
        ha_up: None,
    };
    let t = hf_controller::translate_with(&sb, &TranslateOptions::default(), &extra);
    assert_eq!(t.zones["lr/r1/snat"], 9);
    assert!(![0, 9].contains(&t.zones["lr/r2/snat"]));
    assert!(![0, 9].contains(&t.zones["lr/r1/dnat"]));
    let reasons: Vec<&str> = t.diagnostics.iter().map(|x| x.reason.as_str()).collect();
    assert!(
        reasons.iter().any(|r| r
            .starts_with("lr/r2/snat: options:snat-ct-zone=9 is also requested for lr/r1/snat")),
        "{reasons:#?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("lr/r1/dnat held zone 9, which lr/r1/snat now requests")),
        "{reasons:#?}"
    );
}

/// A local port with `mirror_rules` gives its chassis's datapath the session (and no
/// translation diagnostic any more: the datapath mirrors); another chassis gets none.
#[test]
fn a_mirrored_local_port_goes_to_its_datapath() {
    let mut d = Delta::default();
    d.chassis = vec![
        RowDelta::Insert(chassis(100, "hv1")),
        RowDelta::Insert(chassis(101, "hv2")),
    ];
    d.datapath_binding = vec![RowDelta::Insert(dp(1, 7, "sw", false))];
    d.mirror = vec![RowDelta::Insert(sb::Mirror {
        uuid: u(50),
        name: "m0".into(),
        sink: "192.0.2.7".into(),
        index: 7,
        type_: sb::MirrorType::Erspan,
        filter: sb::MirrorFilter::ToLport,
        ..Default::default()
    })];
    let mut vm = pb(10, 1, "vm", 1, "");
    vm.chassis = Some(RowRef::new(u(100)));
    vm.mirror_rules = [RowRef::new(u(50))].into();
    d.port_binding = vec![RowDelta::Insert(vm)];
    let sb = snapshot(d);
    let local: std::collections::BTreeSet<String> = ["vm".to_string()].into();
    let (list, bad) = hf_controller::daemon::local_mirrors(&sb, &local);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(
        list,
        vec![hf_datapath::proto::MirrorMsg {
            name: "m0".into(),
            kind: hf_datapath::proto::MirrorKind::Erspan,
            filter: hf_datapath::proto::MirrorFilter::ToLport,
            sink: "192.0.2.7".into(),
            index: 7,
            ports: vec!["vm".into()],
        }]
    );
    let (none, _) = hf_controller::daemon::local_mirrors(&sb, &Default::default());
    assert!(none.is_empty());
    let t = translate(
        &sb,
        &TranslateOptions {
            chassis: Some("hv1".into()),
        },
    );
    assert!(!t.diagnostics.iter().any(|x| x.reason.contains("mirror")));
}

//! Incident B: controllers that met the block form of `ct_commit` (OVN 20.09) rejected every
//! flow using it. These tests show holdfast names the feature, classifies real flows by release,
//! and lowers the block form into the older spelling with identical meaning.

use hf_expr::actions::{Action, CtCommit};
use hf_expr::features::{self, FeatureKind, FeatureSet, Level, Lowering, OvnRelease};
use hf_expr::lflow_list::parse_dump;
use hf_expr::typecheck::resolve;
use hf_expr::{ErrorKind, FieldRef, SymbolTable, Value, parse_actions, parse_actions_with};
use proptest::prelude::*;

/// The two texts from the incident's controller log.
const INCIDENT_ACTION: &str = "ct_commit { ct_label.blocked = 0; }; next;";
const INCIDENT_MATCH: &str = "((ct.new && !ct.est) || (!ct.new && ct.est && !ct.rpl && ct_label.blocked == 1)) && (outport == @pg_557094d0_6698_42c5_abda_e9e52cd0b562 && ip4 && ip4.src == $pg_557094d0_6698_42c5_abda_e9e52cd0b562_ip4)";

fn dump() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/ovn-23.03-lflows-legacy-chassis.txt");
    std::fs::read_to_string(p).expect("fixture")
}

#[test]
fn block_ct_commit_is_rejected_under_hf1_and_ovn_20_06_naming_the_feature() {
    let symtab = SymbolTable::shared();
    for set in ["hf-1", "20.06", "ovn-20.06"] {
        let fs = FeatureSet::parse(set).expect("set");
        let err = parse_actions_with(symtab, INCIDENT_ACTION, &fs).expect_err(set);
        assert_eq!(err.kind, ErrorKind::Feature, "{set}");
        assert!(
            err.message.contains("`ct-commit-block`"),
            "{set}: {}",
            err.message
        );
        assert!(
            err.message.contains("hf-2") && err.message.contains("20.09"),
            "{}",
            err.message
        );
        assert_eq!(
            (err.span.start, err.span.end),
            (0, 35),
            "points at the ct_commit block"
        );
    }
    for set in ["hf-2", "20.09", "23.03"] {
        let fs = FeatureSet::parse(set).expect("set");
        assert!(
            parse_actions_with(symtab, INCIDENT_ACTION, &fs).is_ok(),
            "{set}"
        );
    }
    // The incident's match parses at every level: its text did not change in 20.09; what changed
    // was the SB layout of port groups, which the registry carries as an SB-layout feature.
    assert!(
        hf_expr::parse_match_with(symtab, INCIDENT_MATCH, &FeatureSet::level(Level::Hf1)).is_ok()
    );
    let pg = features::feature("port-group-per-datapath").expect("registered");
    assert_eq!(pg.kind, FeatureKind::SbLayout);
    assert_eq!((pg.hf, pg.ovn), (Level::Hf2, OvnRelease::new(20, 9)));
    assert!(matches!(pg.lowering, Lowering::Older(_)));
    assert!(!FeatureSet::level(Level::Hf1).contains("port-group-per-datapath"));
}

#[test]
fn real_corpus_block_flows_are_rejected_by_old_controllers_and_lower_exactly() {
    let symtab = SymbolTable::shared();
    let (flows, _) = parse_dump(&dump());
    // Everything hf-2 has except the block form: lowering then rewrites only the block.
    let without_block = FeatureSet::parse(
        &FeatureSet::level(Level::Hf2)
            .iter()
            .filter(|f| f.name != "ct-commit-block")
            .map(|f| f.name)
            .collect::<Vec<_>>()
            .join(","),
    )
    .expect("names");
    let mut block_flows = 0;
    let mut lowered = 0;
    for f in &flows {
        let a = parse_actions(symtab, &f.actions).expect("corpus actions parse");
        let blocks: Vec<&Vec<Action>> = a
            .iter()
            .filter_map(|x| match x {
                Action::CtCommit {
                    args: CtCommit::Block(b),
                    ..
                } => Some(b),
                _ => None,
            })
            .collect();
        if blocks.is_empty() {
            continue;
        }
        block_flows += 1;
        for set in [
            FeatureSet::level(Level::Hf1),
            FeatureSet::ovn(OvnRelease::new(20, 6)),
        ] {
            let err = features::check_actions(&a, &set)
                .expect_err("old controllers reject the block form");
            assert_eq!(err.kind, ErrorKind::Feature);
        }
        match features::lower_actions(&a, &without_block) {
            Ok(l) => {
                lowered += 1;
                let (before, after): (Vec<_>, Vec<_>) = (
                    blocks
                        .iter()
                        .map(|b| features::ct_commit_block_effect(b).expect("constant block"))
                        .collect(),
                    l.iter()
                        .filter_map(|x| match x {
                            Action::CtCommit {
                                args: CtCommit::Legacy { mark, label },
                                ..
                            } => Some((*mark, *label)),
                            Action::CtCommit {
                                args: CtCommit::Bare,
                                ..
                            } => Some((None, None)),
                            _ => None,
                        })
                        .collect(),
                );
                assert_eq!(before.len(), after.len(), "line {}", f.line);
                for (((mv, mm), (lv, lm)), (mark, label)) in before.iter().zip(&after) {
                    let m = mark.map_or((0, 0), |c| (c.value, c.mask_bits(32)));
                    let l = label.map_or((0, 0), |c| (c.value, c.mask_bits(128)));
                    assert_eq!(((*mv, *mm), (*lv, *lm)), (m, l), "line {}", f.line);
                }
                assert!(features::check_actions(&l, &without_block).is_ok());
            }
            Err(e) => {
                // Only blocks that copy a field (`ct_label.label = reg3`, `... = eth.src`) have
                // no older spelling.
                assert_eq!(e.kind, ErrorKind::Lowering, "line {}: {e}", f.line);
                let copies = blocks
                    .iter()
                    .any(|b| b.iter().any(|x| matches!(x, Action::Move { .. })));
                assert!(copies, "line {}: {}", f.line, f.actions);
            }
        }
    }
    assert!(
        block_flows >= 4,
        "the corpus has block-form flows ({block_flows})"
    );
    assert!(lowered >= 2, "some of them lower ({lowered})");
}

#[test]
fn every_ovn_release_in_the_registry_orders_and_levels_consistently() {
    for f in features::REGISTRY {
        let hf1 = f.ovn <= OvnRelease::new(20, 6);
        assert_eq!(f.hf == Level::Hf1, hf1, "{}", f.name);
        assert!(FeatureSet::ovn(f.ovn).contains(f.name), "{}", f.name);
        assert!(f.ovn <= OvnRelease::new(23, 3), "{}", f.name);
        if f.hf == Level::Hf2 && f.kind != FeatureKind::SbLayout {
            assert!(
                !matches!(f.lowering, Lowering::Base),
                "{} is newer than hf-1 but claims no lowering is needed",
                f.name
            );
        }
    }
    let names: std::collections::BTreeSet<_> = features::REGISTRY.iter().map(|f| f.name).collect();
    assert_eq!(
        names.len(),
        features::REGISTRY.len(),
        "feature names are unique"
    );
    assert_eq!(
        FeatureSet::parse(&FeatureSet::all().to_list()),
        Ok(FeatureSet::all())
    );
    assert!(FeatureSet::parse("hf-9").is_err());
}

/// Applies `ct_commit { ... }`'s assignments one by one to (mark, label), bit by bit, via the
/// symbol table: an implementation independent of the lowering's.
fn apply_block(body: &[Action], mut mark: u128, mut label: u128) -> (u128, u128) {
    let symtab = SymbolTable::shared();
    for a in body {
        let Action::Assign {
            dst,
            value: Value::Const(c),
            ..
        } = a
        else {
            panic!("constant block")
        };
        let r = resolve(symtab, dst).expect("field");
        let (_, lo, hi) = r.bits.expect("bits");
        let slot = if dst.name.starts_with("ct_mark") {
            &mut mark
        } else {
            &mut label
        };
        for bit in lo..=hi {
            let i = bit - lo;
            if c.mask_bits(hi - lo + 1) >> i & 1 == 1 {
                *slot = (*slot & !(1u128 << bit)) | (((c.value >> i) & 1) << bit);
            }
        }
    }
    (mark, label)
}

fn ct_target() -> impl Strategy<Value = FieldRef> {
    prop_oneof![
        Just(FieldRef::new("ct_label.blocked")),
        Just(FieldRef::new("ct_label.natted")),
        Just(FieldRef::new("ct_label.label")),
        Just(FieldRef::new("ct_mark")),
        Just(FieldRef::new("ct_label")),
        (0u32..32).prop_map(|b| FieldRef::bits("ct_mark", b, b)),
        (0u32..120).prop_map(|b| FieldRef::bits("ct_label", b, b + 7)),
    ]
}

proptest! {
    #[test]
    fn lowering_the_block_form_keeps_its_meaning(
        assigns in proptest::collection::vec((ct_target(), any::<u128>()), 0..5),
        mark0 in any::<u32>(),
        label0 in any::<u128>(),
    ) {
        let symtab = SymbolTable::shared();
        let body: Vec<Action> = assigns
            .into_iter()
            .map(|(dst, v)| {
                let w = resolve(symtab, &dst).expect("field").width;
                let v = if w >= 128 { v } else { v & ((1u128 << w) - 1) };
                Action::Assign { dst, value: Value::Const(hf_expr::Constant::dec(v)), span: Default::default() }
            })
            .collect();
        let block = vec![Action::CtCommit { args: CtCommit::Block(body.clone()), span: Default::default() }];
        prop_assert!(hf_expr::typecheck::check_actions(symtab, &block).is_ok());
        let lowered = features::lower_actions(&block, &FeatureSet::level(Level::Hf1)).expect("constant blocks lower");
        prop_assert!(features::check_actions(&lowered, &FeatureSet::level(Level::Hf1)).is_ok());
        let (mark, label) = match &lowered[0] {
            Action::CtCommit { args: CtCommit::Legacy { mark, label }, .. } => (*mark, *label),
            Action::CtCommit { args: CtCommit::Bare, .. } => (None, None),
            other => panic!("{other:?}"),
        };
        let apply = |c: Option<hf_expr::Constant>, init: u128, w: u32| match c {
            Some(c) => (init & !c.mask_bits(w)) | (c.value & c.mask_bits(w)),
            None => init,
        };
        let expected = apply_block(&body, u128::from(mark0), label0);
        prop_assert_eq!((apply(mark, u128::from(mark0), 32), apply(label, label0, 128)), expected);
        // And the lowered text parses back under hf-1.
        let text = hf_expr::printer::actions_to_string(&lowered);
        prop_assert!(parse_actions_with(symtab, &text, &FeatureSet::level(Level::Hf1)).is_ok(), "{}", text);
    }
}

/// Every match or action feature that claims an older spelling really lowers to it: with every
/// feature but that one, the construct is rejected, lowers, and the lowered text parses.
#[test]
fn every_older_spelling_in_the_registry_has_a_lowering() {
    use hf_expr::normalize::{Limits, Normalizer, Sets};
    let symtab = SymbolTable::shared();
    let examples: &[(&str, bool, &str)] = &[
        ("ip4-src-mcast", true, "ip4.src_mcast && udp"),
        ("ct-mark-subfields", true, "ct.est && ct_mark.blocked == 0"),
        (
            "ct-lb-backends",
            false,
            "ct_lb(backends=10.0.0.1:80,10.0.0.2:80);",
        ),
        (
            "ct-commit-block",
            false,
            "ct_commit { ct_label.blocked = 1; }; next;",
        ),
        ("ct-lb-mark", false, "ct_lb_mark;"),
    ];
    for f in features::REGISTRY {
        if f.kind == FeatureKind::SbLayout || !matches!(f.lowering, Lowering::Older(_)) {
            continue;
        }
        let (_, is_match, text) = examples
            .iter()
            .find(|(n, _, _)| *n == f.name)
            .unwrap_or_else(|| panic!("no lowering example for `{}`", f.name));
        let without = FeatureSet::parse(
            &FeatureSet::all()
                .iter()
                .filter(|g| g.name != f.name)
                .map(|g| g.name)
                .collect::<Vec<_>>()
                .join(","),
        )
        .expect("names");
        let hf1 = &without;
        if *is_match {
            let e = hf_expr::parse_match(symtab, text).expect("example parses");
            assert!(
                features::check_expr(&e, hf1).is_err(),
                "{text} needs lowering"
            );
            let l = features::lower_expr(&e, hf1).unwrap_or_else(|err| panic!("{}: {err}", f.name));
            let printed = l.to_string();
            assert!(
                hf_expr::parse_match_with(symtab, &printed, hf1).is_ok(),
                "{printed}"
            );
            if f.name == "ip4-src-mcast" {
                // A pure respelling: same normalised form.
                let mut n = Normalizer::new(symtab, Limits::default());
                let sets = Sets::default();
                assert_eq!(n.normalize(&e, &sets).ok(), n.normalize(&l, &sets).ok());
            }
        } else {
            let a = parse_actions(symtab, text).expect("example parses");
            assert!(
                features::check_actions(&a, hf1).is_err(),
                "{text} needs lowering"
            );
            let l =
                features::lower_actions(&a, hf1).unwrap_or_else(|err| panic!("{}: {err}", f.name));
            let printed = hf_expr::printer::actions_to_string(&l);
            assert!(
                parse_actions_with(symtab, &printed, hf1).is_ok(),
                "{printed}"
            );
        }
    }
}

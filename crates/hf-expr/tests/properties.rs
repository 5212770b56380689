//! Properties: random syntax trees round-trip through the printer; normalisation preserves
//! meaning (random packets evaluate the same against a match and its normalised form).

use hf_expr::actions::*;
use hf_expr::ast::{Expr, FieldRef, RelOp, Rhs, Subscript, Term, Value};
use hf_expr::constant::{Constant, Format, Mask, prefix_mask};
use hf_expr::eval::{Packet, eval_expr, eval_normalized};
use hf_expr::normalize::{Limits, Normalizer, Sets};
use hf_expr::{SymbolTable, parser, printer, typecheck};
use proptest::prelude::*;

// ----- generators for syntax -----------------------------------------------------------------------

fn ident() -> impl Strategy<Value = String> {
    "[g-z_][a-z0-9_]{0,6}"
}

fn field_ref() -> impl Strategy<Value = FieldRef> {
    let names = prop_oneof![
        Just("tcp.dst"),
        Just("reg0"),
        Just("ip4.src"),
        Just("inport"),
        Just("ct.est"),
        Just("eth.src"),
        Just("xxreg0"),
        Just("ct_label.blocked"),
        Just("outport"),
        Just("flags.loopback")
    ];
    let sub = prop_oneof![
        Just(None),
        (0u32..200).prop_map(|b| Some(Subscript::Bit(b))),
        (0u32..100, 0u32..100).prop_map(|(a, b)| Some(Subscript::Range(a, a + b))),
    ];
    (names, sub).prop_map(|(n, sub)| FieldRef {
        name: n.to_string(),
        sub,
        span: Default::default(),
    })
}

fn constant() -> impl Strategy<Value = Constant> {
    let base = prop_oneof![
        any::<u64>().prop_map(|v| Constant::new(u128::from(v), Format::Decimal)),
        any::<u128>().prop_map(|v| Constant::new(v, Format::Hex)),
        any::<u32>().prop_map(|v| Constant::new(u128::from(v), Format::Ipv4)),
        any::<u128>().prop_map(|v| Constant::new(v, Format::Ipv6)),
        (0u64..(1 << 48)).prop_map(|v| Constant::new(u128::from(v), Format::Mac)),
    ];
    (base, 0u8..4, any::<u128>(), any::<u8>()).prop_map(|(mut c, kind, m, p)| {
        let natural: u32 = match c.format {
            Format::Ipv4 => 32,
            Format::Mac => 48,
            _ => 128,
        };
        match kind {
            // A prefix, for addresses.
            1 if matches!(c.format, Format::Ipv4 | Format::Ipv6) => {
                let p = p % (natural as u8 + 1);
                c.value &= prefix_mask(natural, p);
                c.mask = Some(Mask::Prefix(p));
            }
            // An explicit mask in the value's own form (or hex).
            2 | 3 => {
                let m = if natural == 128 {
                    m
                } else {
                    m & ((1u128 << natural) - 1)
                };
                let fmt = if kind == 2 || c.format == Format::Decimal {
                    Format::Hex
                } else {
                    c.format
                };
                let m = if fmt == Format::Decimal {
                    m & u128::from(u64::MAX)
                } else {
                    m
                };
                c.value &= m;
                c.mask = Some(Mask::Bits(m, fmt));
            }
            _ => {}
        }
        c
    })
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => constant().prop_map(Value::Const),
        1 => any::<String>().prop_map(Value::Str),
        1 => ident().prop_map(Value::AddrSet),
        1 => ident().prop_map(Value::PortGroup),
        1 => ident().prop_map(Value::Template),
    ]
}

fn term() -> impl Strategy<Value = Term> {
    value().prop_map(Term::new)
}

fn proto() -> impl Strategy<Value = String> {
    prop_oneof![Just("tcp"), Just("udp"), Just("sctp")].prop_map(str::to_string)
}

fn relop() -> impl Strategy<Value = RelOp> {
    prop_oneof![
        Just(RelOp::Eq),
        Just(RelOp::Ne),
        Just(RelOp::Lt),
        Just(RelOp::Le),
        Just(RelOp::Gt),
        Just(RelOp::Ge)
    ]
}

fn leaf() -> BoxedStrategy<Expr> {
    prop_oneof![
        any::<bool>().prop_map(Expr::Bool),
        field_ref().prop_map(Expr::Field),
        (
            field_ref(),
            relop(),
            prop_oneof![
                term().prop_map(Rhs::One),
                proptest::collection::vec(term(), 1..4).prop_map(Rhs::Set)
            ]
        )
            .prop_map(|(field, op, rhs)| Expr::Cmp { field, op, rhs }),
        (
            field_ref(),
            term(),
            term(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(field, low, high, up, a, b)| {
                let (low_op, high_op) = match (up, a, b) {
                    (true, a, b) => (
                        if a { RelOp::Lt } else { RelOp::Le },
                        if b { RelOp::Lt } else { RelOp::Le },
                    ),
                    (false, a, b) => (
                        if a { RelOp::Gt } else { RelOp::Ge },
                        if b { RelOp::Gt } else { RelOp::Ge },
                    ),
                };
                Expr::Range {
                    field,
                    low,
                    low_op,
                    high_op,
                    high,
                }
            }),
        any::<String>().prop_map(|port| Expr::ChassisResident {
            port,
            span: Default::default()
        }),
    ]
    .boxed()
}

fn expr() -> impl Strategy<Value = Expr> {
    leaf().prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::and),
            proptest::collection::vec(inner, 2..4).prop_map(Expr::or),
        ]
    })
}

fn ip() -> impl Strategy<Value = Constant> {
    prop_oneof![
        any::<u32>().prop_map(|v| Constant::new(u128::from(v), Format::Ipv4)),
        any::<u128>().prop_map(|v| Constant::new(v, Format::Ipv6)),
    ]
}

fn opt_value() -> impl Strategy<Value = OptValue> {
    let flat = prop_oneof![
        constant().prop_map(OptValue::Const),
        any::<String>().prop_map(OptValue::Str),
        field_ref().prop_map(OptValue::Field),
    ];
    prop_oneof![3 => flat.clone(), 1 => proptest::collection::vec(flat, 0..3).prop_map(OptValue::Set)]
}

fn result_fn() -> impl Strategy<Value = ResultFn> {
    let f = field_ref;
    prop_oneof![
        (f(), f(), f()).prop_map(|(port, ip, mac)| ResultFn::LookupArp { port, ip, mac }),
        (f(), f()).prop_map(|(port, ip)| ResultFn::LookupNdIp { port, ip }),
        f().prop_map(|mac| ResultFn::GetFdb { mac }),
        (f(), f()).prop_map(|(port, mac)| ResultFn::LookupFdb { port, mac }),
        (
            any::<bool>(),
            proptest::collection::vec((ident(), opt_value()), 0..4)
        )
            .prop_map(|(v6, opts)| ResultFn::PutDhcpOpts { v6, opts }),
        proptest::collection::vec((ident(), opt_value()), 0..3)
            .prop_map(|opts| ResultFn::PutNdRaOpts { opts }),
        Just(ResultFn::DnsLookup),
        Just(ResultFn::ChkLbHairpin),
        Just(ResultFn::CheckOutPortSec),
        Just(ResultFn::ChkLbAff),
        any::<u32>().prop_map(|len| ResultFn::CheckPktLarger { len }),
    ]
}

fn simple_action() -> BoxedStrategy<Action> {
    let s = || Default::default();
    prop_oneof![
        prop_oneof![
            Just(NextArgs::Plain),
            (0u32..256).prop_map(NextArgs::Table),
            (any::<bool>(), 0u32..256, 0u8..3).prop_map(|(e, t, k)| NextArgs::Named {
                pipeline: (k != 1).then_some(if e {
                    Pipeline::Egress
                } else {
                    Pipeline::Ingress
                }),
                table: (k != 0).then_some(t),
            }),
        ]
        .prop_map(move |args| Action::Next { args, span: s() }),
        Just(Action::Output { span: s() }),
        Just(Action::HandleBfdMsg { span: s() }),
        (
            field_ref(),
            prop_oneof![
                constant().prop_map(Value::Const),
                any::<String>().prop_map(Value::Str),
                ident().prop_map(Value::Template)
            ]
        )
            .prop_map(move |(dst, value)| Action::Assign {
                dst,
                value,
                span: s()
            }),
        (field_ref(), field_ref()).prop_map(move |(dst, src)| Action::Move {
            dst,
            src,
            span: s()
        }),
        (field_ref(), field_ref()).prop_map(move |(a, b)| Action::Exchange { a, b, span: s() }),
        field_ref().prop_map(move |field| Action::Push { field, span: s() }),
        Just(Action::DecTtl { span: s() }),
        Just(Action::CtNext { span: s() }),
        (
            proptest::option::of(constant()),
            proptest::option::of(constant())
        )
            .prop_map(move |(mark, label)| Action::CtCommit {
                args: CtCommit::Legacy { mark, label },
                span: s()
            }),
        (
            0u8..4,
            proptest::option::of((
                ip(),
                proptest::option::of((1u16.., 1u16..)),
                proptest::collection::vec(ident(), 0..2)
            ))
        )
            .prop_map(move |(k, t)| Action::CtNat {
                kind: [
                    NatKind::Dnat,
                    NatKind::Snat,
                    NatKind::DnatInCzone,
                    NatKind::SnatInCzone
                ][k as usize],
                target: t.map(|(addr, ports, flags)| NatTarget { addr, ports, flags }),
                span: s(),
            }),
        Just(Action::CtClear { span: s() }),
        Just(Action::CtCommitNat { span: s() }),
        Just(Action::CtSnatToVip { span: s() }),
        (
            any::<bool>(),
            proptest::option::of((
                proptest::collection::vec((ip(), proptest::option::of(any::<u16>())), 1..4),
                any::<bool>(),
                proptest::option::of(any::<String>()),
                proptest::option::of(prop_oneof![Just("skip_snat"), Just("force_snat")])
            ))
        )
            .prop_map(move |(mark, args)| Action::CtLb {
                mark,
                args: args.map(|(b, legacy, hash, flag)| CtLbArgs {
                    backends: b
                        .into_iter()
                        .map(|(ip, port)| LbBackend::Addr(Backend { ip, port }))
                        .collect(),
                    hash_fields: if legacy { None } else { hash },
                    flag: if legacy {
                        None
                    } else {
                        flag.map(str::to_string)
                    },
                    legacy,
                }),
                span: s(),
            }),
        (field_ref(), field_ref(), field_ref()).prop_map(move |(port, ip, mac)| Action::PutNd {
            port,
            ip,
            mac,
            span: s()
        }),
        (field_ref(), field_ref()).prop_map(move |(port, ip)| Action::GetArp {
            port,
            ip,
            span: s()
        }),
        (field_ref(), field_ref()).prop_map(move |(port, mac)| Action::PutFdb {
            port,
            mac,
            span: s()
        }),
        (field_ref(), result_fn()).prop_map(move |(dst, func)| Action::Result {
            dst,
            func,
            span: s()
        }),
        (
            field_ref(),
            proptest::collection::vec((any::<u16>(), proptest::option::of(any::<u16>())), 0..4)
        )
            .prop_map(move |(dst, choices)| Action::Select {
                dst,
                choices,
                span: s()
            }),
        (0u16..61441).prop_map(move |queue| Action::SetQueue { queue, span: s() }),
        (any::<u64>(), proptest::option::of(any::<u64>())).prop_map(move |(rate, burst)| {
            Action::SetMeter {
                rate,
                burst,
                span: s(),
            }
        }),
        (
            proptest::option::of(any::<String>()),
            proptest::option::of(prop_oneof![Just("alert"), Just("info"), Just("debug")]),
            proptest::option::of(prop_oneof![Just("allow"), Just("drop"), Just("reject")]),
            proptest::option::of(any::<String>())
        )
            .prop_map(move |(name, sev, verdict, meter)| Action::Log {
                args: LogArgs {
                    name,
                    severity: sev.map(str::to_string),
                    verdict: verdict.map(str::to_string),
                    meter
                },
                span: s(),
            }),
        (
            proptest::option::of(any::<bool>()),
            proptest::collection::vec(any::<String>(), 1..3)
        )
            .prop_map(move |(liveness, ports)| Action::FwdGroup {
                liveness,
                ports,
                span: s()
            }),
        (
            any::<String>(),
            proptest::collection::vec((ident(), any::<String>()), 0..3)
        )
            .prop_map(move |(ev, rest)| {
                let mut args = vec![("event".to_string(), ev)];
                args.extend(rest);
                Action::TriggerEvent { args, span: s() }
            }),
        Just(Action::Igmp { span: s() }),
        Just(Action::HandleDhcpv6Reply { span: s() }),
        (any::<String>(), field_ref()).prop_map(move |(vport, parent)| Action::BindVport {
            vport,
            parent,
            span: s()
        }),
        field_ref().prop_map(move |port| Action::HandleSvcCheck { port, span: s() }),
        (any::<bool>(), proto()).prop_map(move |(ipv6, proto)| Action::CommitEcmpNh {
            ipv6,
            proto,
            span: s()
        }),
        (any::<String>(), any::<String>(), proto(), any::<u32>()).prop_map(
            move |(vip, backend, proto, timeout)| Action::CommitLbAff {
                vip,
                backend,
                proto,
                timeout,
                span: s()
            }
        ),
        proptest::collection::vec(
            (
                ident(),
                any::<u64>().prop_map(|v| Constant::dec(u128::from(v)))
            ),
            0..4
        )
        .prop_map(move |args| Action::Sample { args, span: s() }),
    ]
    .boxed()
}

fn action() -> impl Strategy<Value = Action> {
    simple_action().prop_recursive(3, 24, 4, |inner| {
        // `drop;` is only valid alone in its list.
        let body = prop_oneof![
            4 => proptest::collection::vec(inner, 0..4),
            1 => Just(vec![Action::Drop { span: Default::default() }]),
        ];
        prop_oneof![
            body.clone().prop_map(|b| Action::CtCommit {
                args: CtCommit::Block(b),
                span: Default::default()
            }),
            (0usize..12, body).prop_map(|(k, body)| {
                let kinds = [
                    NestedKind::Arp,
                    NestedKind::NdNs,
                    NestedKind::NdNa,
                    NestedKind::NdNaRouter,
                    NestedKind::Icmp4,
                    NestedKind::Icmp4Error,
                    NestedKind::Icmp6,
                    NestedKind::Icmp6Error,
                    NestedKind::TcpReset,
                    NestedKind::SctpAbort,
                    NestedKind::Reject,
                    NestedKind::Clone,
                ];
                Action::Nested {
                    kind: kinds[k],
                    body,
                    span: Default::default(),
                }
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_matches_round_trip_through_the_printer(e in expr()) {
        let text = e.to_string();
        let back = parser::parse_match_text(&text);
        prop_assert_eq!(back.as_ref(), Ok(&e), "printed as {}", text);
    }

    #[test]
    fn random_actions_round_trip_through_the_printer(a in proptest::collection::vec(action(), 0..5)) {
        let text = printer::actions_to_string(&a);
        let back = hf_expr::actions::parse_actions_text(&text);
        prop_assert_eq!(back.as_ref(), Ok(&a), "printed as {}", text);
    }
}

// ----- normalisation preserves meaning --------------------------------------------------------------

fn small_const(max: u128) -> impl Strategy<Value = Constant> {
    (0..=max).prop_map(Constant::dec)
}

fn typed_leaf() -> BoxedStrategy<Expr> {
    let cmp = |f: &'static str, op: RelOp, rhs: Rhs| Expr::Cmp {
        field: FieldRef::new(f),
        op,
        rhs,
    };
    prop_oneof![
        any::<bool>().prop_map(Expr::Bool),
        prop_oneof![
            Just("ip4"),
            Just("ip6"),
            Just("ip"),
            Just("tcp"),
            Just("udp"),
            Just("ct.est"),
            Just("ct.new"),
            Just("ct.trk"),
            Just("icmp"),
            Just("eth.mcast")
        ]
        .prop_map(|n| Expr::Field(FieldRef::new(n))),
        (0u32..4).prop_map(|b| Expr::Field(FieldRef::bits("reg0", b, b))),
        (relop(), small_const(9)).prop_map(move |(op, c)| cmp(
            "tcp.dst",
            op,
            Rhs::One(Term::new(Value::Const(c)))
        )),
        (relop(), small_const(15), 0u32..3).prop_map(move |(op, c, lo)| Expr::Cmp {
            field: FieldRef::bits("reg0", lo, lo + 3),
            op,
            rhs: Rhs::One(Term::new(Value::Const(c))),
        }),
        (
            any::<bool>(),
            proptest::collection::vec(small_const(9), 1..4)
        )
            .prop_map(move |(eq, v)| cmp(
                "udp.src",
                if eq { RelOp::Eq } else { RelOp::Ne },
                Rhs::Set(v.into_iter().map(|c| Term::new(Value::Const(c))).collect()),
            )),
        (0u128..4, 30u8..33, any::<bool>()).prop_map(move |(v, p, eq)| {
            let mut c = Constant::new(0x0a00_0000 | v, Format::Ipv4);
            c.value &= prefix_mask(32, p);
            c.mask = Some(Mask::Prefix(p));
            cmp(
                "ip4.src",
                if eq { RelOp::Eq } else { RelOp::Ne },
                Rhs::One(Term::new(Value::Const(c))),
            )
        }),
        prop_oneof![Just(0x800u128), Just(0x86dd), Just(0x806)].prop_map(move |v| cmp(
            "eth.type",
            RelOp::Eq,
            Rhs::One(Term::new(Value::Const(Constant::new(v, Format::Hex))))
        )),
        prop_oneof![Just("a"), Just("b")].prop_map(move |p| cmp(
            "inport",
            RelOp::Eq,
            Rhs::One(Term::new(Value::Str(p.into())))
        )),
        Just(cmp(
            "inport",
            RelOp::Eq,
            Rhs::One(Term::new(Value::PortGroup("pg".into())))
        )),
        any::<bool>().prop_map(move |eq| cmp(
            "ip4.dst",
            if eq { RelOp::Eq } else { RelOp::Ne },
            Rhs::One(Term::new(Value::AddrSet("s1".into())))
        )),
        (small_const(9), small_const(9)).prop_map(|(a, b)| Expr::Range {
            field: FieldRef::new("tcp.src"),
            low: Term::new(Value::Const(a)),
            low_op: RelOp::Le,
            high_op: RelOp::Lt,
            high: Term::new(Value::Const(b)),
        }),
        prop_oneof![Just("a"), Just("b")].prop_map(|p| Expr::ChassisResident {
            port: p.into(),
            span: Default::default()
        }),
    ]
    .boxed()
}

fn typed_expr() -> impl Strategy<Value = Expr> {
    typed_leaf().prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            proptest::collection::vec(inner.clone(), 2..4).prop_map(Expr::and),
            proptest::collection::vec(inner, 2..4).prop_map(Expr::or),
        ]
    })
}

fn packet() -> impl Strategy<Value = Packet> {
    (
        prop_oneof![
            Just(0x800u128),
            Just(0x86dd),
            Just(0x806),
            any::<u16>().prop_map(u128::from)
        ],
        prop_oneof![
            Just(6u128),
            Just(17),
            Just(1),
            Just(58),
            any::<u8>().prop_map(u128::from)
        ],
        (0u128..12, 0u128..12, 0u128..12),
        0u128..0x40,
        0u128..256,
        (0u128..6, 0u128..6),
        0u128..2,
        (
            prop_oneof![Just("a"), Just("b"), Just("c")],
            any::<bool>(),
            any::<bool>(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(et, proto, (tdst, tsrc, usrc), ct, reg0, (s4, d4), mc, (inport, ra, rb, mac))| {
                let mut p = Packet::default();
                p.set("eth.type", et);
                p.set("ip.proto", proto);
                p.set("tcp.dst", tdst);
                p.set("tcp.src", tsrc);
                p.set("udp.src", usrc);
                p.set("ct_state", ct);
                p.set("xxreg0", reg0 << 96);
                p.set("ip4.src", 0x0a00_0000 | s4);
                p.set("ip4.dst", 0x0a00_0000 | d4);
                p.set("eth.dst", (u128::from(mac) & !(1 << 40)) | (mc << 40));
                p.ports[0] = inport.to_string();
                if ra {
                    p.resident.push("a".into());
                }
                if rb {
                    p.resident.push("b".into());
                }
                p
            },
        )
}

fn sets() -> Sets {
    let mut s = Sets::default();
    let mut half = Constant::new(0x0a00_0002, Format::Ipv4);
    half.mask = Some(Mask::Prefix(31));
    s.addr_sets.insert(
        "s1".into(),
        vec![Constant::new(0x0a00_0001, Format::Ipv4), half],
    );
    s.port_groups.insert("pg".into(), vec!["a".into()]);
    s
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn normalisation_preserves_meaning(e in typed_expr(), packets in proptest::collection::vec(packet(), 16)) {
        let symtab = SymbolTable::shared();
        prop_assume!(typecheck::check_match(symtab, &e).is_ok());
        let sets = sets();
        let limits = Limits { max_cross: 4, max_conj: 20_000 };
        let Ok(n) = Normalizer::new(symtab, limits).normalize(&e, &sets) else {
            return Ok(());
        };
        for p in &packets {
            prop_assert_eq!(eval_expr(symtab, &e, p, &sets), eval_normalized(&n, p), "match {} on {:?}\nnormalised:\n{}", e, p, n);
        }
    }
}

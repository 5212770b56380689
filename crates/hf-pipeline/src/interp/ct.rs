//! Conntrack actions and generated packets, the interpreter's two ops that leave the logical
//! tables: [`Runner::exec_ct`] runs a conntrack action and loads its result into the context,
//! [`Runner::generate`] replaces the packet by the one a nested action builds. They do not walk
//! tables or record ops (the parent module does).

use super::*;

impl Runner<'_> {
    /// Runs a conntrack action and, unless it is a plain commit, loads its result into the
    /// context. The result comes back when tracing (`None` otherwise, and when no conntrack
    /// action ran).
    pub(super) fn exec_ct(&mut self, zone: u16, act_idx: u32) -> Option<CtResult> {
        let owner = self.prog.owner;
        let act = self.prog.acts.get(act_idx as usize)?;
        let ctx = &mut self.scr.ctx;
        let cta = match act {
            CAct::CtNext => CtAction::lookup(),
            CAct::CtCommit { mark, label, moves } => CtAction {
                mark: with_moves32(*mark, moves, ctx),
                label: with_moves128(label.as_deref().copied(), moves, ctx),
                ..CtAction::commit(owner)
            },
            CAct::CtNat { kind, target } => match target {
                None => CtAction::lookup().with_nat(),
                Some(r) if matches!(kind, NatKind::Snat | NatKind::SnatInCzone) => {
                    CtAction::commit(owner).snat(*r)
                }
                Some(r) => CtAction::commit(owner).dnat(*r),
            },
            CAct::CtCommitNat => CtAction::commit(owner).with_nat(),
            CAct::CtLb {
                mark,
                backends,
                hash,
                flag,
            } => {
                let v6 = ctx.f[slot::ETH_TYPE] == 0x86dd;
                let unlisted = if backends.is_empty() {
                    self.what_if.as_ref().and_then(|w| w.lb_dst_unlisted(v6))
                } else {
                    None
                };
                if let Some((ip, port)) = unlisted {
                    // What-if only: ovn-trace's --lb-dst on a backend-less ct_lb.
                    CtAction::commit(owner).dnat(NatRange::addr_port(ip, port))
                } else if backends.is_empty() {
                    CtAction::lookup().with_nat()
                } else {
                    let h = if hash.is_empty() {
                        five_tuple_hash(ctx)
                    } else {
                        hash.iter().fold(0x2545_f491_4f6c_dd1d, |h, s| {
                            crate::classifier::mix(h, ctx.f[usize::from(*s)])
                        })
                    };
                    // `--lb-dst` (trace's what-if) picks the backend when it names one.
                    let i = self
                        .what_if
                        .as_mut()
                        .and_then(|w| w.lb_pick(backends))
                        .unwrap_or((h % backends.len() as u64) as usize);
                    let (ip, port) = backends[i];
                    let mut a = CtAction::commit(owner).dnat(NatRange::addr_port(ip, port));
                    let bits = Masked {
                        value: 2 | flag,
                        mask: 2 | flag,
                    };
                    if *mark {
                        a.mark = Some(bits);
                    } else {
                        a.label = Some(Masked {
                            value: u128::from(bits.value),
                            mask: u128::from(bits.mask),
                        });
                    }
                    a
                }
            }
            CAct::CtSnatToVip { dp } => {
                let st = ctx.f[slot::CT_STATE] as u8;
                let orig = ctx.ct_orig?;
                if st & 0x80 == 0 {
                    return None;
                }
                let dst = u128::from_be_bytes(orig.dst);
                let dst = if orig.v6 { dst } else { dst & 0xffff_ffff };
                let d = self.prog.dp_by_key(*dp)?;
                let &(vip, v6, _, _) = d.vips.iter().find(|&&(ip, v6, port, proto)| {
                    ip == dst
                        && v6 == orig.v6
                        && (port == 0 || (port == orig.dport && proto == orig.proto))
                })?;
                let ip = if v6 {
                    std::net::IpAddr::V6(std::net::Ipv6Addr::from(vip))
                } else {
                    std::net::IpAddr::V4(std::net::Ipv4Addr::from(vip as u32))
                };
                CtAction::commit(owner).snat(NatRange::addr_port(ip, 0))
            }
            _ => return None,
        };
        let mut r = match &mut self.ct {
            CtHandle::Live(ct) => ct.process(zone, &ctx.parsed, self.now, &cta),
            CtHandle::WhatIf(ct) => ct.peek(zone, &ctx.parsed, self.now, &cta),
        };
        if let Some(w) = self.what_if.as_mut()
            && !matches!(
                act,
                CAct::CtCommit { .. } | CAct::CtCommitNat | CAct::CtSnatToVip { .. }
            )
            && let Some(forced) = w.forced_ct_state()
        {
            r.state.0 = forced;
            // An assumed connection with this NAT: rewrite to the target when the scratch
            // table had no connection to do it (ovn-trace's `ct_snat(IP)` always does).
            if let CAct::CtNat {
                kind,
                target: Some(t),
            } = act
                && forced & 0x10 == 0
            {
                let snat = matches!(kind, NatKind::Snat | NatKind::SnatInCzone);
                if snat && r.rewrite.src.is_none() {
                    r.rewrite.src = Some(t.addr_min);
                    if t.port_min != 0 {
                        r.rewrite.sport = Some(t.port_min);
                    }
                } else if !snat && r.rewrite.dst.is_none() {
                    r.rewrite.dst = Some(t.addr_min);
                    if t.port_min != 0 {
                        r.rewrite.dport = Some(t.port_min);
                    }
                }
            }
            // The forced state keeps the NAT flags of what was applied (ovn-trace ORs
            // `snat`/`dnat` into it), so `chk_lb_hairpin` and `ct.dnat` still see the NAT.
            if r.rewrite.src.is_some() {
                r.state.0 |= 0x40;
            }
            if r.rewrite.dst.is_some() {
                r.state.0 |= 0x80;
            }
        }
        if !r.rewrite.is_empty() {
            ctx.own(self.input);
        }
        match act {
            CAct::CtCommit { .. } => {}
            // No recirculation: the NAT applies to the packet, ct_state stays as it was.
            CAct::CtSnatToVip { .. } => ctx.rewrite(&r.rewrite),
            _ => ctx.load_ct(&r),
        }
        // Only a trace reads the result: copying it out otherwise reloads the just-written
        // result with wider loads than its stores (a store-forwarding stall per packet).
        if self.trace.is_some() { Some(r) } else { None }
    }

    /// [`Runner::exec_ct`] for a plain `ct_next` ([`Op::Ct`]'s `lookup_only`), outside "what
    /// if" mode: the same lookup and the same writes to the context, without reading the
    /// action from the program's arena (a chain of dependent loads on every replay).
    pub(super) fn exec_ct_next(&mut self, zone: u16) -> Option<CtResult> {
        let ctx = &mut self.scr.ctx;
        let cta = CtAction::lookup();
        let r = match &mut self.ct {
            CtHandle::Live(ct) => ct.process(zone, &ctx.parsed, self.now, &cta),
            CtHandle::WhatIf(ct) => ct.peek(zone, &ctx.parsed, self.now, &cta),
        };
        if !r.rewrite.is_empty() {
            ctx.own(self.input);
        }
        ctx.load_ct(&r);
        if self.trace.is_some() { Some(r) } else { None }
    }

    /// Replaces the packet by the one `kind` generates. False (and no change) when the builder
    /// refuses the packet.
    pub(super) fn generate(&mut self, kind: NestedKind) -> bool {
        let scr = &mut *self.scr;
        let ctx = &scr.ctx;
        let k = ctx.parsed.key;
        let out = &mut scr.build;
        out.clear();
        let ok = match kind {
            NestedKind::Arp if k.is_ipv4() => {
                reply::arp_request(out, k.eth_src, k.ip4_src, k.ip4_dst);
                true
            }
            NestedKind::NdNs if k.is_ipv6() => {
                reply::nd_ns(out, k.eth_src, k.ip6_src, k.ip6_dst);
                true
            }
            NestedKind::NdNa | NestedKind::NdNaRouter => {
                reply::nd_na(out, &k, k.eth_dst, kind == NestedKind::NdNaRouter).is_ok()
            }
            // OVN builds these with the offending packet's own addresses, TTL 255 and type/code
            // 3/1 (1/1 for ICMPv6); the nested actions set the rest (ovn-trace's
            // `execute_icmp4`, pinctrl's `pinctrl_handle_icmp` without loopback).
            NestedKind::Icmp4 | NestedKind::Icmp4Error if k.is_ipv4() => {
                reply::icmp_error_same_addresses(out, &ctx.frame, &ctx.parsed, 3, 1, 0).is_ok()
            }
            NestedKind::Icmp6 | NestedKind::Icmp6Error if k.is_ipv6() => {
                reply::icmp_error_same_addresses(out, &ctx.frame, &ctx.parsed, 1, 1, 0).is_ok()
            }
            NestedKind::TcpReset => reply::tcp_reset_same_addresses(out, &ctx.parsed).is_ok(),
            NestedKind::SctpAbort => reply::sctp_abort(out, &ctx.frame, &ctx.parsed, false).is_ok(),
            // pinctrl's reset for `reject` leaves with TTL 63, like `tcp_reset { }`'s.
            NestedKind::Reject if k.ip_proto == ip_proto::TCP && ctx.parsed.has_l4() => {
                reply::tcp_reset_reject(out, &ctx.parsed).is_ok()
            }
            NestedKind::Reject if k.ip_proto == ip_proto::SCTP && ctx.parsed.has_l4() => {
                reply::sctp_abort(out, &ctx.frame, &ctx.parsed, true).is_ok()
            }
            // `reject` answers back to the sender (addresses swapped) with "port unreachable"
            // for UDP and "host unreachable" otherwise, as ovn-controller's pinctrl does.
            NestedKind::Reject if k.is_ipv4() => {
                let code = if k.ip_proto == ip_proto::UDP { 3 } else { 1 };
                reply::icmp4_error(out, &ctx.frame, &ctx.parsed, k.ip4_dst, 3, code, 0).is_ok()
            }
            NestedKind::Reject if k.is_ipv6() => {
                let code = if k.ip_proto == ip_proto::UDP { 4 } else { 1 };
                reply::icmp6_error(out, &ctx.frame, &ctx.parsed, k.ip6_dst, 1, code, 0).is_ok()
            }
            _ => false,
        };
        if !ok {
            return false;
        }
        let Ok(p) = hf_wire::parse(out, k.in_port, k.metadata) else {
            return false;
        };
        std::mem::swap(&mut scr.ctx.frame, &mut scr.build);
        scr.ctx.parsed = p;
        scr.ctx.load_headers();
        true
    }
}

/// `ct_mark` with the bits of `moves` that target it loaded from the packet.
fn with_moves32(m: Option<Masked<u32>>, moves: &[(Bits, Bits)], ctx: &Ctx) -> Option<Masked<u32>> {
    let l = with_moves(
        m.map(|m| Masked {
            value: u128::from(m.value),
            mask: u128::from(m.mask),
        }),
        moves,
        ctx,
        slot::CT_MARK,
    )?;
    Some(Masked {
        value: l.value as u32,
        mask: l.mask as u32,
    })
}

fn with_moves128(
    m: Option<Masked<u128>>,
    moves: &[(Bits, Bits)],
    ctx: &Ctx,
) -> Option<Masked<u128>> {
    with_moves(m, moves, ctx, slot::CT_LABEL)
}

fn with_moves(
    mut m: Option<Masked<u128>>,
    moves: &[(Bits, Bits)],
    ctx: &Ctx,
    field: usize,
) -> Option<Masked<u128>> {
    for (d, s) in moves {
        if usize::from(d.field) != field {
            continue;
        }
        let v = ctx.read(*s).checked_shl(u32::from(d.lo)).unwrap_or(0) & d.mask();
        let e = m.get_or_insert(Masked { value: 0, mask: 0 });
        e.value = (e.value & !d.mask()) | v;
        e.mask |= d.mask();
    }
    m
}

/// `  nat FIELD=VALUE` trace notes for the header changes of a conntrack rewrite (addresses as
/// `ip4.src`/`ip6.dst`, ports as `l4.src`/`l4.dst`).
pub(super) fn nat_notes(rw: &hf_wire::NatRewrite) -> Vec<String> {
    let fam = |ip: &std::net::IpAddr| if ip.is_ipv4() { "ip4" } else { "ip6" };
    let mut v = Vec::new();
    if let Some(ip) = &rw.src {
        v.push(format!("  nat {}.src={ip}", fam(ip)));
    }
    if let Some(ip) = &rw.dst {
        v.push(format!("  nat {}.dst={ip}", fam(ip)));
    }
    if let Some(p) = rw.sport {
        v.push(format!("  nat l4.src={p}"));
    }
    if let Some(p) = rw.dport {
        v.push(format!("  nat l4.dst={p}"));
    }
    v
}

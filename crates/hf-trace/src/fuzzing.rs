//! The fuzz entry point for microflows (`fuzz/fuzz_targets/microflow.rs`; the committed corpus
//! is replayed by `tests/fuzz_corpus.rs`). Not part of the stable API.
//!
//! Properties: no input panics; a refused microflow's message is non-empty and, for a syntax
//! error, has a caret; an accepted one builds a frame that `hf_wire` parses (for ARP, IPv4 and
//! IPv6) with the addresses the microflow gave and valid checksums.

use crate::{frame, microflow};

/// Runs one input.
pub fn microflow(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match microflow::parse(&text, "fuzz") {
        Err(e) => {
            let s = e.to_string();
            assert!(!s.is_empty());
            if let microflow::MicroflowError::Syntax { .. } = e {
                assert!(s.contains('^'), "no caret: {s}");
            }
        }
        Ok(m) => {
            let f = frame::build(&m);
            let et = m.get("eth.type");
            let vlan_ok = m.get("vlan.tci") & 0x1000 == 0 || !m.has("eth.type") || et != 0x8100;
            if matches!(et, 0x0800 | 0x86dd | 0x0806) && vlan_ok {
                let p = hf_wire::parse(&f, 1, 1)
                    .unwrap_or_else(|e| panic!("{text}: built frame does not parse: {e}"));
                let k = p.key;
                match et {
                    0x0800 => {
                        assert_eq!(u32::from(k.ip4_src) as u128, m.get("ip4.src"), "{text}");
                        assert_eq!(u32::from(k.ip4_dst) as u128, m.get("ip4.dst"), "{text}");
                        assert!(hf_wire::checksums_valid(&f, &p), "{text}: checksums");
                    }
                    0x86dd => {
                        assert_eq!(u128::from(k.ip6_src), m.get("ip6.src"), "{text}");
                        assert!(hf_wire::checksums_valid(&f, &p), "{text}: checksums");
                    }
                    _ => assert_eq!(u128::from(k.arp_op), m.get("arp.op"), "{text}"),
                }
            }
        }
    }
}

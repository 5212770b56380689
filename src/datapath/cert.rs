//! The subject common name (CN) of a peer's X.509 certificate: the chassis name the state
//! channel's TLS authenticated ([`super::state`]). rustls verifies the chain; this reads only
//! the subject of the end-entity certificate, with a small DER reader that never panics (the
//! bytes come from the network, even if a CA signed them).

/// The common name of the peer's certificate (the first of the chain: the end entity).
pub fn peer_common_name(
    certs: Option<&[tokio_rustls::rustls::pki_types::CertificateDer<'static>]>,
) -> Result<String, String> {
    let cert = certs
        .and_then(|c| c.first())
        .ok_or_else(|| "it presented no certificate".to_string())?;
    common_name(cert).map_err(|why| format!("its certificate {why}"))
}

/// One DER element: (tag, contents, what follows). Only what X.509 needs: one-byte tags,
/// definite lengths up to 4 bytes.
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, r) = b.split_first()?;
    if tag & 0x1f == 0x1f {
        return None;
    }
    let (&l0, mut r) = r.split_first()?;
    let len = if l0 < 0x80 {
        usize::from(l0)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let (lb, rest) = r.split_at_checked(n)?;
        r = rest;
        lb.iter().fold(0usize, |a, &x| (a << 8) | usize::from(x))
    };
    let (content, rest) = r.split_at_checked(len)?;
    Some((tag, content, rest))
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
/// id-at-commonName, 2.5.4.3.
const CN_OID: &[u8] = &[0x55, 0x04, 0x03];

/// The subject common name of an X.509 certificate in DER: exactly one is required. The
/// error says what is wrong ("has no common name (CN)", ...).
pub fn common_name(cert: &[u8]) -> Result<String, String> {
    let malformed = || "is malformed (DER)".to_string();
    let (SEQUENCE, cert, _) = der(cert).ok_or_else(malformed)? else {
        return Err(malformed());
    };
    let (SEQUENCE, tbs, _) = der(cert).ok_or_else(malformed)? else {
        return Err(malformed());
    };
    // [0] version (optional), serialNumber, signature, issuer, validity, subject.
    let mut rest = tbs;
    let (tag, _, r) = der(rest).ok_or_else(malformed)?;
    if tag == 0xa0 {
        rest = r;
    }
    for _ in 0..4 {
        let (_, _, r) = der(rest).ok_or_else(malformed)?;
        rest = r;
    }
    let (SEQUENCE, mut rdns, _) = der(rest).ok_or_else(malformed)? else {
        return Err(malformed());
    };
    let mut found: Vec<String> = Vec::new();
    while !rdns.is_empty() {
        let (SET, mut set, r) = der(rdns).ok_or_else(malformed)? else {
            return Err(malformed());
        };
        rdns = r;
        while !set.is_empty() {
            let (SEQUENCE, atv, r) = der(set).ok_or_else(malformed)? else {
                return Err(malformed());
            };
            set = r;
            let (OID, oid, value) = der(atv).ok_or_else(malformed)? else {
                return Err(malformed());
            };
            if oid != CN_OID {
                continue;
            }
            let (tag, v, _) = der(value).ok_or_else(malformed)?;
            let text = match tag {
                // UTF8String, PrintableString, IA5String.
                0x0c | 0x13 | 0x16 => std::str::from_utf8(v)
                    .map(str::to_string)
                    .map_err(|_| "has a common name that is not UTF-8".to_string())?,
                // BMPString: UTF-16BE.
                0x1e if v.len().is_multiple_of(2) => {
                    let units: Vec<u16> = v
                        .chunks_exact(2)
                        .map(|c| u16::from_be_bytes([c[0], c[1]]))
                        .collect();
                    String::from_utf16(&units)
                        .map_err(|_| "has a common name that is not UTF-16".to_string())?
                }
                _ => {
                    return Err(format!(
                        "has a common name of an unsupported type ({tag:#04x})"
                    ));
                }
            };
            found.push(text);
        }
    }
    match found.len() {
        0 => Err("has no common name (CN)".into()),
        1 => Ok(found.remove(0)),
        n => Err(format!("has {n} common names ({})", found.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER element with `tag` around `content`.
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if content.len() < 0x80 {
            v.push(content.len() as u8);
        } else {
            v.push(0x82);
            v.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(content);
        v
    }

    /// A certificate skeleton whose subject has the given (OID, string tag, value)s, one RDN
    /// each.
    fn cert(subject: &[(&[u8], u8, &[u8])]) -> Vec<u8> {
        let mut rdns = Vec::new();
        for (oid, tag, v) in subject {
            let mut atv = tlv(OID, oid);
            atv.extend(tlv(*tag, v));
            rdns.extend(tlv(SET, &tlv(SEQUENCE, &atv)));
        }
        let mut tbs = tlv(0xa0, &tlv(0x02, &[2]));
        tbs.extend(tlv(0x02, &[1, 2, 3]));
        tbs.extend(tlv(SEQUENCE, &tlv(OID, &[0x2a, 0x86])));
        tbs.extend(tlv(SEQUENCE, &[]));
        tbs.extend(tlv(SEQUENCE, &[0x17, 0]));
        tbs.extend(tlv(SEQUENCE, &rdns));
        tbs.extend(tlv(SEQUENCE, &[0; 200]));
        let mut c = tlv(SEQUENCE, &tbs);
        c.extend(tlv(SEQUENCE, &[]));
        tlv(SEQUENCE, &c)
    }

    const O: &[u8] = &[0x55, 0x04, 0x0a];

    #[test]
    fn common_names() {
        assert_eq!(
            common_name(&cert(&[(O, 0x0c, b"Open vSwitch"), (CN_OID, 0x13, b"hv1")])),
            Ok("hv1".into())
        );
        assert_eq!(
            common_name(&cert(&[(CN_OID, 0x1e, &[0, b'h', 0, b'v', 0, b'2'])])),
            Ok("hv2".into())
        );
        assert_eq!(
            common_name(&cert(&[(O, 0x0c, b"x")])),
            Err("has no common name (CN)".into())
        );
        assert!(
            common_name(&cert(&[(CN_OID, 0x0c, b"a"), (CN_OID, 0x0c, b"b")]))
                .unwrap_err()
                .contains("2 common names")
        );
        assert!(common_name(&cert(&[(CN_OID, 0x0c, &[0xff])])).is_err());
        // Every truncation and every single-byte change is an error or a name, never a panic.
        let good = cert(&[(O, 0x0c, b"Open vSwitch"), (CN_OID, 0x0c, b"hv1")]);
        for n in 0..good.len() {
            assert!(common_name(&good[..n]).is_err());
            for x in [0x00, 0x80, 0x84, 0xff] {
                let mut b = good.clone();
                b[n] = x;
                let _ = common_name(&b);
            }
        }
    }
}

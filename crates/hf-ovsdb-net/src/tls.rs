//! TLS for `pssl:` listeners and `ssl:` client connections, on rustls with the ring provider,
//! configured the way OVS configures OpenSSL (lib/stream-ssl.c):
//!
//! - `--private-key`, `--certificate` (PEM; the certificate file may hold a chain) and
//!   `--ca-cert` (PEM, one or more CA certificates) are all required.
//! - Authentication is mutual: a server requires a client certificate and verifies it against
//!   the CA certificates; a client verifies the server's certificate against them. As in OVS,
//!   no host name is checked: certificates made by `ovs-pki` carry a subject such as
//!   `CN=name id:UUID` and no usable DNS name; trust comes from the CA alone.
//! - `--ssl-protocols` takes OVS's forms: a list (`TLSv1.2,TLSv1.3`, separated by commas,
//!   spaces or tabs), a range (`TLSv1.2-TLSv1.3`) or `X+` (X and later). rustls implements
//!   TLS 1.2 and 1.3 only: `TLSv1` and `TLSv1.1` are recognised (OVS 3.1's default list names
//!   them) and reported in a warning, and a setting that leaves no version rustls implements is
//!   an error. The default is TLS 1.2 and 1.3 (OVS's current `TLSv1.2+`).
//! - `--ssl-ciphers` takes an OpenSSL cipher string for TLS 1.2 (TLS 1.3 suites are not
//!   governed by it, as in OpenSSL). It is evaluated against the six TLS 1.2 suites rustls
//!   implements (ECDHE with RSA or ECDSA, AES-GCM or ChaCha20-Poly1305): OpenSSL's aliases and
//!   `+` combinations select among them, the `!`, `-` and `+` prefixes remove and reorder,
//!   `@STRENGTH` sorts, `@SECLEVEL=0..2` holds for every one of them. A cipher rustls does not
//!   implement named explicitly, an unknown word, `@SECLEVEL` above 2, or a string that
//!   selects none of the six while TLS 1.2 is enabled is an error naming it, never ignored.
//!
//! What it does not do: OVS's `--bootstrap-ca-cert`, certificate revocation lists, or peer
//! identity checks beyond the chain (OVS records the peer's CN but does not check it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CipherSuite, DigitallySignedStruct, RootCertStore, SignatureScheme, SupportedCipherSuite,
    SupportedProtocolVersion,
};

pub use rustls::{ClientConfig, ServerConfig};

/// A TLS setting that cannot be used, naming what and why.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM object.
    #[error("{what} {path}: {reason}")]
    File {
        /// Which option (`--private-key`, ...).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `--ssl-protocols` is not usable.
    #[error("--ssl-protocols \"{value}\": {reason}")]
    Protocols {
        /// The setting.
        value: String,
        /// Why.
        reason: String,
    },
    /// `--ssl-ciphers` is not usable.
    #[error("--ssl-ciphers \"{value}\": {reason}")]
    Ciphers {
        /// The setting.
        value: String,
        /// Why.
        reason: String,
    },
    /// rustls refused the combination (e.g. a key that does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The five OVS options, as file paths and strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// `--private-key FILE` (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub private_key: PathBuf,
    /// `--certificate FILE` (PEM; the end-entity certificate first, then any intermediates).
    pub certificate: PathBuf,
    /// `--ca-cert FILE` (PEM; every certificate in it is trusted).
    pub ca_cert: PathBuf,
    /// `--ssl-protocols` (None: TLS 1.2 and 1.3).
    pub protocols: Option<String>,
    /// `--ssl-ciphers` (None: every TLS 1.2 suite rustls implements).
    pub ciphers: Option<String>,
}

/// Loaded key material and parsed settings, from which server and client configurations are
/// built.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    key: Arc<PrivateKeyDer<'static>>,
    chain: Vec<CertificateDer<'static>>,
    roots: Arc<RootCertStore>,
    versions: Vec<&'static SupportedProtocolVersion>,
    provider: Arc<CryptoProvider>,
    /// Diagnostics about settings that were accepted only in part (e.g. `TLSv1` in
    /// `--ssl-protocols`); the caller logs them.
    pub warnings: Vec<String>,
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::File {
        what,
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

impl TlsSettings {
    /// Read the three files and parse the two strings.
    pub fn load(files: &TlsFiles) -> Result<Self, TlsError> {
        let key = read("--private-key", &files.private_key)?;
        let cert = read("--certificate", &files.certificate)?;
        let ca = read("--ca-cert", &files.ca_cert)?;
        Self::from_pem(
            (&files.private_key, &key),
            (&files.certificate, &cert),
            (&files.ca_cert, &ca),
            files.protocols.as_deref(),
            files.ciphers.as_deref(),
        )
    }

    /// Parse PEM contents (each with the path it came from, for errors).
    pub fn from_pem(
        key: (&Path, &[u8]),
        cert: (&Path, &[u8]),
        ca: (&Path, &[u8]),
        protocols: Option<&str>,
        ciphers: Option<&str>,
    ) -> Result<Self, TlsError> {
        let file_err = |what, path: &Path, reason: String| TlsError::File {
            what,
            path: path.to_path_buf(),
            reason,
        };
        let pkey = PrivateKeyDer::from_pem_slice(key.1).map_err(|e| {
            file_err(
                "--private-key",
                key.0,
                format!("no usable private key (PKCS#8, PKCS#1 RSA or SEC1 EC PEM): {e}"),
            )
        })?;
        let chain = certs("--certificate", cert.0, cert.1)?;
        let cas = certs("--ca-cert", ca.0, ca.1)?;
        let mut roots = RootCertStore::empty();
        for (i, c) in cas.into_iter().enumerate() {
            roots.add(c).map_err(|e| {
                file_err(
                    "--ca-cert",
                    ca.0,
                    format!("certificate {} is not a usable CA certificate: {e}", i + 1),
                )
            })?;
        }
        let mut warnings = Vec::new();
        let versions = parse_protocols(protocols, &mut warnings)?;
        let tls12 = versions.contains(&&rustls::version::TLS12);
        let base = rustls::crypto::ring::default_provider();
        let mut suites: Vec<SupportedCipherSuite> = base
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| matches!(s, SupportedCipherSuite::Tls13(_)))
            .collect();
        match ciphers {
            Some(spec) => {
                let chosen = parse_ciphers(spec)?;
                if chosen.is_empty() && tls12 {
                    return Err(TlsError::Ciphers {
                        value: spec.to_string(),
                        reason: format!(
                            "selects none of the TLS 1.2 cipher suites rustls implements ({})",
                            TLS12_SUITES
                                .iter()
                                .map(|s| s.name)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    });
                }
                suites.extend(chosen);
            }
            None => suites.extend(
                base.cipher_suites
                    .iter()
                    .copied()
                    .filter(|s| matches!(s, SupportedCipherSuite::Tls12(_))),
            ),
        }
        let provider = Arc::new(CryptoProvider {
            cipher_suites: suites,
            ..base
        });
        let s = TlsSettings {
            key: Arc::new(pkey),
            chain,
            roots: Arc::new(roots),
            versions,
            provider,
            warnings,
        };
        // Build both once so that a key that does not match its certificate fails here, at
        // start-up, and not at the first connection.
        s.server_config()?;
        s.client_config()?;
        Ok(s)
    }

    /// A server configuration: our certificate, client certificates required and verified
    /// against the CA certificates.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, TlsError> {
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            self.roots.clone(),
            self.provider.clone(),
        )
        .build()
        .map_err(|e| TlsError::Config(format!("client certificate verifier: {e}")))?;
        let cfg = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&self.versions)
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Config(format!("--private-key and --certificate: {e}")))?;
        Ok(Arc::new(cfg))
    }

    /// A client configuration: our certificate offered, the server's verified against the CA
    /// certificates without a host-name check (as OVS).
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, TlsError> {
        let verifier = Arc::new(CaOnlyVerifier {
            roots: self.roots.clone(),
            algs: self.provider.signature_verification_algorithms,
        });
        let mut cfg = ClientConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&self.versions)
            .map_err(|e| TlsError::Config(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_auth_cert(self.chain.clone(), self.key.clone_key())
            .map_err(|e| TlsError::Config(format!("--private-key and --certificate: {e}")))?;
        // No session resumption: ovsdb-server sets no session id context, so OpenSSL fails a
        // resumed handshake with a client certificate ("session id context uninitialized"),
        // and the second connection of a client that resumes would be refused. OVS's own
        // clients never resume either.
        cfg.resumption = rustls::client::Resumption::disabled();
        Ok(Arc::new(cfg))
    }
}

fn certs(
    what: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let mut out = Vec::new();
    for c in CertificateDer::pem_slice_iter(pem) {
        out.push(c.map_err(|e| TlsError::File {
            what,
            path: path.to_path_buf(),
            reason: format!("bad PEM certificate: {e}"),
        })?);
    }
    if out.is_empty() {
        return Err(TlsError::File {
            what,
            path: path.to_path_buf(),
            reason: "holds no PEM certificate".into(),
        });
    }
    Ok(out)
}

/// Verifies a server's chain against the CA certificates only, as OVS does (no host name).
#[derive(Debug)]
struct CaOnlyVerifier {
    roots: Arc<RootCertStore>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for CaOnlyVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.algs.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// `--ssl-protocols`, in OVS's syntax (see the module doc). Warnings go to `warnings`.
pub fn parse_protocols(
    spec: Option<&str>,
    warnings: &mut Vec<String>,
) -> Result<Vec<&'static SupportedProtocolVersion>, TlsError> {
    // (name, rank, implemented by rustls)
    const NAMES: [(&str, usize); 4] =
        [("TLSv1", 0), ("TLSv1.1", 1), ("TLSv1.2", 2), ("TLSv1.3", 3)];
    let Some(spec) = spec.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(vec![&rustls::version::TLS13, &rustls::version::TLS12]);
    };
    let err = |reason: String| TlsError::Protocols {
        value: spec.to_string(),
        reason,
    };
    let rank = |w: &str| {
        NAMES
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(w))
            .map(|(_, r)| *r)
            .ok_or_else(|| {
                err(format!(
                    "\"{w}\": protocol not recognized (TLSv1, TLSv1.1, TLSv1.2, TLSv1.3)"
                ))
            })
    };
    let mut wanted = [false; 4];
    if let Some(x) = spec.strip_suffix('+') {
        for w in wanted.iter_mut().skip(rank(x.trim())?) {
            *w = true;
        }
    } else if let Some((a, b)) = spec.split_once('-') {
        let (a, b) = (rank(a.trim())?, rank(b.trim())?);
        if a > b {
            return Err(err(
                "the range is empty (the first version is the later)".into()
            ));
        }
        for w in wanted.iter_mut().take(b + 1).skip(a) {
            *w = true;
        }
    } else {
        let words: Vec<&str> = spec
            .split([' ', ',', '\t'])
            .filter(|w| !w.is_empty())
            .collect();
        if words.is_empty() {
            return Err(err("names no protocol".into()));
        }
        let mut ranks = Vec::new();
        for w in words {
            ranks.push(rank(w)?);
        }
        // OpenSSL enables a contiguous range: the versions between the lowest and the highest.
        let (lo, hi) = (
            ranks.iter().copied().min().unwrap_or(2),
            ranks.iter().copied().max().unwrap_or(3),
        );
        for (r, w) in wanted.iter_mut().enumerate().take(hi + 1).skip(lo) {
            if !ranks.contains(&r) {
                warnings.push(format!(
                    "--ssl-protocols \"{spec}\": {} is not configured, but will be enabled anyway",
                    NAMES[r].0
                ));
            }
            *w = true;
        }
    }
    let old: Vec<&str> = (0..2).filter(|r| wanted[*r]).map(|r| NAMES[r].0).collect();
    let mut out = Vec::new();
    if wanted[3] {
        out.push(&rustls::version::TLS13);
    }
    if wanted[2] {
        out.push(&rustls::version::TLS12);
    }
    if out.is_empty() {
        return Err(err(format!(
            "{} not available: rustls implements TLSv1.2 and TLSv1.3 only",
            old.join(" and ")
        )));
    }
    if !old.is_empty() {
        warnings.push(format!(
            "--ssl-protocols \"{spec}\": {} not available (rustls implements TLSv1.2 and TLSv1.3 only); enabling {}",
            old.join(" and "),
            [(3, "TLSv1.3"), (2, "TLSv1.2")]
                .iter()
                .filter(|(r, _)| wanted[*r])
                .map(|(_, n)| *n)
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    Ok(out)
}

/// One TLS 1.2 suite rustls implements, with its OpenSSL name and the OpenSSL aliases it
/// belongs to.
struct Suite12 {
    name: &'static str,
    id: CipherSuite,
    aliases: &'static [&'static str],
    bits: u32,
}

const COMMON: &[&str] = &[
    "ALL", "DEFAULT", "HIGH", "ECDHE", "EECDH", "kECDHE", "kEECDH", "TLSv1.2",
];

const TLS12_SUITES: &[Suite12] = &[
    Suite12 {
        name: "ECDHE-ECDSA-AES256-GCM-SHA384",
        id: CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        aliases: &["aECDSA", "ECDSA", "AES", "AESGCM", "AES256", "SHA384"],
        bits: 256,
    },
    Suite12 {
        name: "ECDHE-ECDSA-AES128-GCM-SHA256",
        id: CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        aliases: &["aECDSA", "ECDSA", "AES", "AESGCM", "AES128", "SHA256"],
        bits: 128,
    },
    Suite12 {
        name: "ECDHE-ECDSA-CHACHA20-POLY1305",
        id: CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        aliases: &["aECDSA", "ECDSA", "CHACHA20", "SHA256"],
        bits: 256,
    },
    Suite12 {
        name: "ECDHE-RSA-AES256-GCM-SHA384",
        id: CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        aliases: &["aRSA", "AES", "AESGCM", "AES256", "SHA384"],
        bits: 256,
    },
    Suite12 {
        name: "ECDHE-RSA-AES128-GCM-SHA256",
        id: CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        aliases: &["aRSA", "AES", "AESGCM", "AES128", "SHA256"],
        bits: 128,
    },
    Suite12 {
        name: "ECDHE-RSA-CHACHA20-POLY1305",
        id: CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        aliases: &["aRSA", "CHACHA20", "SHA256"],
        bits: 256,
    },
];

/// OpenSSL aliases that select none of the suites rustls implements (valid words in a cipher
/// string; they select nothing here, which is what they would select among these suites).
const EMPTY_ALIASES: &[&str] = &[
    "COMPLEMENTOFALL",
    "COMPLEMENTOFDEFAULT",
    "MEDIUM",
    "LOW",
    "EXP",
    "EXPORT",
    "EXPORT40",
    "EXPORT56",
    "aNULL",
    "eNULL",
    "NULL",
    "ADH",
    "AECDH",
    "MD5",
    "RC4",
    "RC2",
    "DES",
    "3DES",
    "IDEA",
    "SEED",
    "CAMELLIA",
    "CAMELLIA128",
    "CAMELLIA256",
    "ARIA",
    "ARIA128",
    "ARIA256",
    "AESCCM",
    "AESCCM8",
    "SHA1",
    "SHA",
    "RSA",
    "kRSA",
    "DH",
    "DHE",
    "EDH",
    "kDHE",
    "kEDH",
    "kDHEPSK",
    "kECDHEPSK",
    "kRSAPSK",
    "DSS",
    "aDSS",
    "PSK",
    "kPSK",
    "aPSK",
    "SRP",
    "kSRP",
    "aSRP",
    "GOST94",
    "GOST89MAC",
    "kGOST",
    "aGOST",
    "aGOST01",
    "SSLv3",
    "TLSv1",
    "TLSv1.0",
];

/// `--ssl-ciphers`: the TLS 1.2 suites an OpenSSL cipher string selects, in order.
pub fn parse_ciphers(spec: &str) -> Result<Vec<SupportedCipherSuite>, TlsError> {
    let err = |reason: String| TlsError::Ciphers {
        value: spec.to_string(),
        reason,
    };
    let mut list: Vec<usize> = Vec::new();
    let mut banned = [false; TLS12_SUITES.len()];
    for item in spec
        .split([':', ',', ' '])
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        if let Some(cmd) = item.strip_prefix('@') {
            if cmd.eq_ignore_ascii_case("STRENGTH") {
                list.sort_by_key(|&i| std::cmp::Reverse(TLS12_SUITES[i].bits));
            } else if let Some(level) = cmd.strip_prefix("SECLEVEL=") {
                match level.parse::<u8>() {
                    Ok(0..=2) => {}
                    _ => {
                        return Err(err(format!(
                            "\"{item}\": only security levels 0 to 2 are supported (every suite and ovs-pki's 2048-bit RSA keys meet level 2)"
                        )));
                    }
                }
            } else {
                return Err(err(format!(
                    "\"{item}\": unknown command (@STRENGTH, @SECLEVEL=N)"
                )));
            }
            continue;
        }
        let (op, body) = match item.as_bytes()[0] {
            b'!' | b'-' | b'+' => (item.as_bytes()[0], &item[1..]),
            _ => (b' ', item),
        };
        let mut sel: Vec<usize> = (0..TLS12_SUITES.len()).collect();
        for word in body.split('+') {
            let m = matches(word).ok_or_else(|| {
                if word.contains('-') || word.starts_with("TLS_") {
                    err(format!(
                        "\"{word}\": a cipher suite rustls does not implement (TLS 1.2 suites available: {})",
                        TLS12_SUITES
                            .iter()
                            .map(|s| s.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                } else {
                    err(format!("\"{word}\": unknown cipher or alias"))
                }
            })?;
            sel.retain(|i| m.contains(i));
        }
        match op {
            b'!' => {
                for &i in &sel {
                    banned[i] = true;
                }
                list.retain(|i| !sel.contains(i));
            }
            b'-' => list.retain(|i| !sel.contains(i)),
            b'+' => {
                let (moved, rest): (Vec<usize>, Vec<usize>) =
                    list.iter().partition(|i| sel.contains(i));
                list = rest;
                list.extend(moved);
            }
            _ => {
                for i in sel {
                    if !banned[i] && !list.contains(&i) {
                        list.push(i);
                    }
                }
            }
        }
    }
    let provider = rustls::crypto::ring::default_provider();
    list.into_iter()
        .map(|i| {
            provider
                .cipher_suites
                .iter()
                .copied()
                .find(|s| s.suite() == TLS12_SUITES[i].id)
                .ok_or_else(|| {
                    err(format!(
                        "{}: missing from the provider",
                        TLS12_SUITES[i].name
                    ))
                })
        })
        .collect()
}

/// The suites (indices into [`TLS12_SUITES`]) one word selects; None for an unknown word.
fn matches(word: &str) -> Option<Vec<usize>> {
    if let Some(i) = TLS12_SUITES
        .iter()
        .position(|s| s.name.eq_ignore_ascii_case(word) || format!("{:?}", s.id) == word)
    {
        return Some(vec![i]);
    }
    if COMMON.contains(&word) {
        return Some((0..TLS12_SUITES.len()).collect());
    }
    let some: Vec<usize> = TLS12_SUITES
        .iter()
        .enumerate()
        .filter(|(_, s)| s.aliases.contains(&word))
        .map(|(i, _)| i)
        .collect();
    if !some.is_empty() {
        return Some(some);
    }
    EMPTY_ALIASES.contains(&word).then(Vec::new)
}

/// The TLS configuration of the server's `pssl:` listeners, shared by all of them and
/// replaceable at run time (e.g. when `db:` references to the `SSL` table change). Empty until
/// set: a `pssl:` listener without a configuration refuses connections with a log line.
#[derive(Clone, Default)]
pub struct ServerTls(Arc<RwLock<Option<Arc<ServerConfig>>>>);

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("configured", &self.0.read().is_some())
            .finish()
    }
}

impl ServerTls {
    /// A handle holding `cfg`.
    pub fn new(cfg: Option<Arc<ServerConfig>>) -> Self {
        ServerTls(Arc::new(RwLock::new(cfg)))
    }

    /// Replace the configuration (new connections use it; established ones keep theirs).
    pub fn set(&self, cfg: Option<Arc<ServerConfig>>) {
        *self.0.write() = cfg;
    }

    /// The current configuration.
    pub fn get(&self) -> Option<Arc<ServerConfig>> {
        self.0.read().clone()
    }
}

/// How long a `pssl:` client may take to finish its handshake.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Accept TLS on `tcp` (an accepted `pssl:` connection): refuse, with a log line naming the
/// listener, the peer and the reason, a client that sends plain text, presents no certificate
/// or one the CA certificates do not vouch for; otherwise return the TLS stream.
pub async fn accept(
    listener: &str,
    tcp: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    tls: &ServerTls,
) -> Option<tokio_rustls::server::TlsStream<tokio::net::TcpStream>> {
    let Some(cfg) = tls.get() else {
        tracing::warn!(
            "{listener}: refused {peer}: no TLS configuration (--private-key, --certificate and --ca-cert)"
        );
        return None;
    };
    let handshake = async {
        let mut first = [0u8; 1];
        match tcp.peek(&mut first).await {
            Ok(0) => return Err("closed before the TLS handshake".to_string()),
            Ok(_) if first[0] != 0x16 => {
                let what = match first[0] {
                    b'{' | b'[' | b' ' | b'\n' | b'\r' | b'\t' => "plain JSON-RPC",
                    _ => "data that is not TLS",
                };
                return Err(format!(
                    "sent {what} on a TLS (pssl:) listener: the client is not using ssl:"
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(format!("read error: {e}")),
        }
        tokio_rustls::TlsAcceptor::from(cfg)
            .accept(tcp)
            .await
            .map_err(|e| format!("TLS handshake failed: {e}"))
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
        Ok(Ok(s)) => {
            tracing::debug!("{listener}: TLS connection from {peer}");
            Some(s)
        }
        Ok(Err(reason)) => {
            tracing::warn!("{listener}: refused {peer}: {reason}");
            None
        }
        Err(_) => {
            tracing::warn!(
                "{listener}: refused {peer}: no TLS handshake within {HANDSHAKE_TIMEOUT:?}"
            );
            None
        }
    }
}

/// Connect to `addr` (`IP:PORT` or `HOST:PORT`, the part after `ssl:`) and finish a TLS
/// handshake with `cfg`.
pub async fn connect(
    addr: &str,
    cfg: Arc<ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let name = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => ServerName::try_from(host.to_string()).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("ssl:{addr}: \"{host}\" is not an IP address or host name: {e}"),
            )
        })?,
    };
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .map_err(|e| std::io::Error::other(format!("ssl:{addr}: TLS handshake failed: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[SupportedCipherSuite]) -> Vec<String> {
        v.iter().map(|s| format!("{:?}", s.suite())).collect()
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a PEM file\n").unwrap();
        let files = |k: &Path, c: &Path, ca: &Path| TlsFiles {
            private_key: k.to_path_buf(),
            certificate: c.to_path_buf(),
            ca_cert: ca.to_path_buf(),
            protocols: None,
            ciphers: None,
        };
        let missing = dir.path().join("missing.pem");
        let e = TlsSettings::load(&files(&missing, &junk, &junk))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--private-key ") && e.contains("missing.pem"),
            "{e}"
        );
        let e = TlsSettings::load(&files(&junk, &junk, &junk))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--private-key ") && e.contains("no usable private key"),
            "{e}"
        );
        let e = TlsSettings::from_pem(
            (
                Path::new("k.pem"),
                b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            ),
            (Path::new("c.pem"), b"nothing"),
            (Path::new("ca.pem"), b"nothing"),
            None,
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--certificate c.pem: holds no PEM certificate"),
            "{e}"
        );
    }

    #[test]
    fn protocols_follow_ovs_syntax() {
        let mut w = Vec::new();
        let v = parse_protocols(Some("TLSv1.2,TLSv1.3"), &mut w).unwrap();
        assert_eq!(v.len(), 2);
        assert!(w.is_empty());
        let v = parse_protocols(Some("tlsv1.2"), &mut w).unwrap();
        assert_eq!(v, vec![&rustls::version::TLS12]);
        let v = parse_protocols(Some("TLSv1.3"), &mut w).unwrap();
        assert_eq!(v, vec![&rustls::version::TLS13]);
        let v = parse_protocols(Some("TLSv1.2+"), &mut w).unwrap();
        assert_eq!(v.len(), 2);
        let v = parse_protocols(Some("TLSv1.2-TLSv1.3"), &mut w).unwrap();
        assert_eq!(v.len(), 2);
        assert!(w.is_empty());
        // OVS 3.1's default list: TLS 1.2 only, with a warning naming the rest.
        let v = parse_protocols(Some("TLSv1,TLSv1.1,TLSv1.2"), &mut w).unwrap();
        assert_eq!(v, vec![&rustls::version::TLS12]);
        assert!(
            w.iter()
                .any(|l| l.contains("TLSv1 and TLSv1.1 not available")),
            "{w:?}"
        );
        for bad in [
            "TLSv1",
            "TLSv1,TLSv1.1",
            "SSLv3",
            "TLSv1.3-TLSv1.2",
            "TLSv1.4+",
            ", ,",
        ] {
            let e = parse_protocols(Some(bad), &mut w).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn cipher_strings_map_onto_rustls_suites() {
        let all = parse_ciphers("HIGH:!aNULL:!MD5").unwrap();
        assert_eq!(all.len(), 6);
        let all = parse_ciphers("DEFAULT:@SECLEVEL=2").unwrap();
        assert_eq!(all.len(), 6);
        let rsa = parse_ciphers("ECDHE+aRSA+AESGCM").unwrap();
        assert_eq!(
            names(&rsa),
            [
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
            ]
        );
        let one = parse_ciphers("ECDHE-RSA-AES128-GCM-SHA256").unwrap();
        assert_eq!(names(&one), ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]);
        // `!` bans for good; `-` only removes.
        let v = parse_ciphers("!CHACHA20:ALL").unwrap();
        assert_eq!(v.len(), 4);
        let v = parse_ciphers("-CHACHA20:ALL").unwrap();
        assert_eq!(v.len(), 6);
        // `+` moves to the end.
        let v = parse_ciphers("ALL:+AES128").unwrap();
        assert!(
            names(&v[4..]).iter().all(|n| n.contains("AES_128")),
            "{:?}",
            names(&v)
        );
        assert!(parse_ciphers("MEDIUM").unwrap().is_empty());
        for (bad, why) in [
            ("AES256-SHA", "does not implement"),
            ("DHE-RSA-AES256-GCM-SHA384", "does not implement"),
            ("HIGH:FROB", "unknown cipher or alias"),
            ("HIGH:@SECLEVEL=3", "security levels"),
            ("@FOO", "unknown command"),
        ] {
            let e = parse_ciphers(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}

//! Live migration's state channel between two `holdfast datapath` daemons (127.0.0.1 and
//! 127.0.0.2, one `--state-listen` port for both): vm1 moves from hv1 to hv2, hv2 pulls its
//! conntrack state from hv1 over mutual TLS with certificates made by real `ovs-pki`
//! (CN=hv1, CN=hv2), and the port's RARP on hv2 completes the migration; everything is watched
//! through real `ovs-appctl` (`datapath/migrations`, `datapath/state-sessions`). Strangers are
//! refused and logged while the sessions between the chassis go on: a certificate of the same
//! CA for a chassis the program does not know, a certificate whose CN is not the chassis its
//! hello names, a TLS client without a certificate, a plain TCP client. The same over plain
//! TCP, and a datapath without `--state-listen`.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;

use hf_datapath::StateMsg;
use hf_datapath::migrate::STATE_VERSION;
use hf_datapath::proto::{ActivationMsg, LocationMsg, MigrationMsg, ProgramMsg};
use hf_ovsdb_net::tls::{TlsFiles, TlsSettings};

use super::*;

/// A PKI made by `ovs-pki` in `dir`: one CA (the switch CA) and certificates whose CN is the
/// name as given (`-u`).
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path, names: &[&str]) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        let pki = format!("--dir={}", dir.join("pki").display());
        common::run_ok(
            Command::new("ovs-pki")
                .arg(&pki)
                .arg("init")
                .current_dir(dir),
        );
        for n in names {
            common::run_ok(
                Command::new("ovs-pki")
                    .args(["-u", &pki, "req+sign", n, "switch"])
                    .current_dir(dir),
            );
        }
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("pki/switchca/cacert.pem")
    }

    fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}-privkey.pem"))
    }

    fn cert(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}-cert.pem"))
    }

    /// `-p KEY -c CERT -C CA` for `name`.
    fn args(&self, name: &str) -> Vec<String> {
        vec![
            "-p".into(),
            self.key(name).display().to_string(),
            "-c".into(),
            self.cert(name).display().to_string(),
            "-C".into(),
            self.ca().display().to_string(),
        ]
    }

    /// A client configuration presenting `name`'s certificate and trusting the CA.
    fn client(&self, name: &str) -> Arc<rustls::ClientConfig> {
        TlsSettings::load(&TlsFiles {
            private_key: self.key(name),
            certificate: self.cert(name),
            ca_cert: self.ca(),
            protocols: None,
            ciphers: None,
        })
        .unwrap()
        .client_config()
        .unwrap()
    }
}

/// A TCP port free on both loopback addresses (both daemons listen on it).
fn free_tcp_port() -> u16 {
    for _ in 0..50 {
        let a = std::net::TcpListener::bind((IPS[0], 0)).unwrap();
        let p = a.local_addr().unwrap().port();
        if std::net::TcpListener::bind((IPS[1], p)).is_ok() {
            return p;
        }
    }
    panic!("no TCP port free on both 127.0.0.1 and 127.0.0.2");
}

/// Polls `what` every 20 ms until `done` holds for its answer; panics after 30 s with the last
/// answer and `context` (nothing here is timed: the deadline only stops a hung test).
fn wait_for(what: impl Fn() -> String, done: impl Fn(&str) -> bool, context: &str) -> String {
    let t0 = Instant::now();
    loop {
        let got = what();
        if done(&got) {
            return got;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "waited 30 s for {context}; last answer:\n{got}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The log line of `name` holding every one of `parts` (waits for it).
fn wait_log(dir: &Path, name: &str, parts: &[&str]) -> String {
    let log = dir.join(format!("{name}.log"));
    wait_for(
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.lines()
                .find(|l| parts.iter().all(|p| l.contains(p)))
                .map(str::to_string)
                .unwrap_or_default()
        },
        |l| !l.is_empty(),
        &format!("a line with {parts:?} in {}", log.display()),
    )
}

/// `key=value` fields of one line.
fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The line of `datapath/migrations` on `name` for `port` in `role`, once `done` holds for it.
fn migration(
    dir: &Path,
    name: &str,
    role: &str,
    done: impl Fn(&BTreeMap<String, String>) -> bool,
) -> BTreeMap<String, String> {
    let line = wait_for(
        || appctl(dir, name, &["datapath/migrations"]),
        |out| {
            out.lines()
                .map(fields)
                .any(|f| f["port"] == "vm1" && f["role"] == role && done(&f))
        },
        &format!("vm1's migration ({role}) on {name}"),
    );
    line.lines()
        .map(fields)
        .find(|f| f["port"] == "vm1" && f["role"] == role && done(f))
        .unwrap()
}

/// The session lines of `datapath/state-sessions` on `name`.
fn sessions(dir: &Path, name: &str) -> Vec<BTreeMap<String, String>> {
    appctl(dir, name, &["datapath/state-sessions"])
        .lines()
        .filter(|l| l.starts_with("chassis="))
        .map(fields)
        .collect()
}

/// hv1's program: vm1 is local and leaves for hv2.
fn source_program() -> ProgramMsg {
    let mut p = example::program(1, 1, IPS);
    p.migrations = vec![MigrationMsg {
        port: "vm1".into(),
        incoming: false,
        peers: vec!["hv2".into()],
        ..MigrationMsg::default()
    }];
    p
}

/// hv2's program: vm1 is bound here too and waits for its RARP; its state comes from hv1.
fn destination_program() -> ProgramMsg {
    let mut p = example::program(1, 2, IPS);
    let vm1 =
        &mut std::sync::Arc::make_mut(&mut std::sync::Arc::make_mut(&mut p.datapaths[0]).ports)[0];
    assert_eq!(vm1.name, "vm1");
    vm1.location = LocationMsg::Local("vm1".into());
    vm1.resident = true;
    vm1.activation = Some(ActivationMsg {
        rarp: true,
        ..ActivationMsg::default()
    });
    p.migrations = vec![MigrationMsg {
        port: "vm1".into(),
        incoming: true,
        peers: vec!["hv1".into()],
        ..MigrationMsg::default()
    }];
    p
}

/// Says hello on `name`'s control socket and installs `program`.
fn install(dir: &Path, name: &str, program: ProgramMsg) {
    let mut c = Client::connect(&dir.join(format!("{name}.sock")));
    c.send(&ToDatapath::Hello {
        version: PROTOCOL_VERSION,
        chassis: name.into(),
    });
    assert!(
        matches!(c.recv(), FromDatapath::Hello { .. }),
        "{name}: no hello"
    );
    c.send(&ToDatapath::Program(Box::new(program)));
    loop {
        match c.recv() {
            FromDatapath::Installed { flow_errors, .. } => {
                assert!(flow_errors.is_empty(), "{name}: {flow_errors:?}");
                return;
            }
            FromDatapath::Error { message } => panic!("{name}: program refused: {message}"),
            _ => {}
        }
    }
}

/// vm1's RARP (its hypervisor's announcement after the move).
fn rarp() -> Vec<u8> {
    let mut f = Vec::new();
    hf_wire::reply::arp_request(&mut f, EthAddr(VM1_MAC), VM1_IP, VM1_IP);
    f[12..14].copy_from_slice(&[0x80, 0x35]);
    f[20..22].copy_from_slice(&[0, 3]);
    f
}

/// Starts hv1 (vm1) and hv2 (vm1 arriving, vm2) with `hv_args(hv)`, makes a connection from
/// vm1 on hv1, moves vm1 to hv2 and checks that its state went along; returns the sessions'
/// lines (hv1's, hv2's) once the migration completed.
fn migrate_vm1(
    d: &mut Daemons,
    hv_args: impl Fn(usize) -> Vec<String>,
    tls: &str,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let geneve = free_port();
    for (hv, ports) in [
        (1, &["vm1,02:00:00:00:00:01"][..]),
        (2, &["vm1,02:00:00:00:00:01", "vm2,02:00:00:00:00:02"][..]),
    ] {
        let out = spawn(d, hv, geneve, ports, &hv_args(hv));
        assert!(
            out.status.success(),
            "hv{hv}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let dir = d.dir.path().to_path_buf();
    // A connection of vm1's on hv1 (committed in its zone, lsp/vm1).
    install(&dir, "hv1", source_program());
    let p = ping(41);
    appctl(&dir, "hv1", &["datapath/inject", "vm1", &hex(&p)]);
    let ct = appctl(&dir, "hv1", &["dpctl/dump-conntrack", "lsp/vm1"]);
    assert!(
        ct.contains("icmp,orig=(src=10.0.0.1,dst=10.0.0.2,id=41"),
        "{ct}"
    );
    // hv2 learns that vm1 arrives: it dials hv1 and pulls vm1's state (the pre-copy).
    install(&dir, "hv2", destination_program());
    let inc = migration(&dir, "hv2", "in", |f| f["precopy"] != "0");
    assert_eq!(inc["peer"], "hv1", "{inc:?}");
    assert_eq!(inc["precopy"], "1", "{inc:?}");
    assert_eq!(inc["outcome"], "running", "{inc:?}");
    let out = migration(&dir, "hv1", "out", |f| f["precopy"] != "0");
    assert_eq!(out["peer"], "hv2", "{out:?}");
    assert_eq!(out["precopy"], "1", "{out:?}");
    let ct = appctl(&dir, "hv2", &["dpctl/dump-conntrack", "lsp/vm1"]);
    assert!(
        ct.contains("icmp,orig=(src=10.0.0.1,dst=10.0.0.2,id=41"),
        "hv2 did not import vm1's connection: {ct}"
    );
    // One session, dialed by the destination from its own address.
    let s2 = sessions(&dir, "hv2");
    assert_eq!(s2.len(), 1, "{s2:?}");
    let s1 = sessions(&dir, "hv1");
    assert_eq!(s1.len(), 1, "{s1:?}");
    for (s, peer, direction) in [(&s2[0], "hv1", "out"), (&s1[0], "hv2", "in")] {
        assert_eq!(s["chassis"], peer, "{s:?}");
        assert_eq!(s["direction"], direction, "{s:?}");
        assert_eq!(s["tls"], tls, "{s:?}");
        assert_eq!(s["state"], "up", "{s:?}");
    }
    assert!(s1[0]["address"].starts_with("127.0.0.2:"), "{s1:?}");
    let port = s2[0]["address"].rsplit_once(':').unwrap().1.to_string();
    assert_eq!(s2[0]["address"], format!("127.0.0.1:{port}"), "{s2:?}");
    // vm1 resumes on hv2: its RARP activates the port, hv1 sends the final delta.
    appctl(&dir, "hv2", &["datapath/inject", "vm1", &hex(&rarp())]);
    let inc = migration(&dir, "hv2", "in", |f| f["outcome"] != "running");
    assert_eq!(inc["outcome"], "completed", "{inc:?}");
    assert_ne!(inc["activated_us"], "-", "{inc:?}");
    let out = migration(&dir, "hv1", "out", |f| f["outcome"] != "running");
    assert_eq!(out["outcome"], "completed", "{out:?}");
    // Bytes went both ways (the pull one way, the state the other).
    let s1 = sessions(&dir, "hv1");
    let s2 = sessions(&dir, "hv2");
    for s in [&s1[0], &s2[0]] {
        assert_ne!(s["bytes_in"], "0", "{s:?}");
        assert_ne!(s["bytes_out"], "0", "{s:?}");
    }
    (s1[0].clone(), s2[0].clone())
}

/// A server verifier that trusts anything: for a client that must get as far as the server's
/// check of its own (absent) certificate.
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS client of `addr` with `cfg`, and its local address.
fn tls_connect(cfg: Arc<rustls::ClientConfig>, addr: SocketAddr) -> (TlsStream, SocketAddr) {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let local = tcp.local_addr().unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let conn = rustls::ClientConnection::new(cfg, name).unwrap();
    (rustls::StreamOwned::new(conn, tcp), local)
}

fn hello(chassis: &str) -> Vec<u8> {
    encode(&StateMsg::Hello {
        version: STATE_VERSION,
        chassis: chassis.into(),
    })
    .unwrap()
}

/// Reads state messages until the peer ends the session; returns them. Fails when the
/// session stays open (the read timeout).
fn read_to_end(s: &mut impl Read) -> Vec<StateMsg> {
    let mut dec = Decoder::<StateMsg>::new();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => dec.push(&buf[..n]),
            Err(e) => {
                assert!(
                    !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    "the session stayed open: {e}"
                );
                break;
            }
        }
        while let Some(m) = dec.next_msg().unwrap() {
            got.push(m);
        }
    }
    got
}

fn alive(dir: &Path, name: &str) {
    let v = appctl(dir, name, &["version"]);
    assert!(v.contains("holdfast"), "{name}: {v}");
}

#[test]
fn state_channel_over_mutual_tls_migrates_and_refuses_strangers() {
    if !common::require(
        "state_channel_over_mutual_tls_migrates_and_refuses_strangers",
        &["ovs-appctl", "ovs-pki"],
    ) {
        return;
    }
    let mut d = Daemons {
        dir: tempfile::tempdir().unwrap(),
        pidfiles: Vec::new(),
    };
    let dir = d.dir.path().to_path_buf();
    let pki = Pki::new(&dir.join("pki"), &["hv1", "hv2", "rogue"]);
    let state = free_tcp_port();
    let (s1, s2) = migrate_vm1(
        &mut d,
        |hv| {
            let mut a = pki.args(&format!("hv{hv}"));
            a.push(format!("--state-listen=pssl:{state}"));
            a
        },
        "yes",
    );
    assert_eq!(s1["cert"], "hv2", "{s1:?}");
    assert_eq!(s2["cert"], "hv1", "{s2:?}");
    let hv1: SocketAddr = (IPS[0], state).into();

    // (a) A certificate of the same CA for a chassis the program does not know: the TLS
    // handshake passes, the hello is refused, hv1 names it and closes the session.
    let (mut rogue, rogue_addr) = tls_connect(pki.client("rogue"), hv1);
    rogue.write_all(&hello("rogue")).unwrap();
    let got = read_to_end(&mut rogue);
    assert_eq!(
        got,
        vec![StateMsg::Hello {
            version: STATE_VERSION,
            chassis: "hv1".into()
        }],
        "hv1 said more than hello to a stranger"
    );
    let line = wait_log(
        &dir,
        "hv1",
        &[
            "state channel from rogue refused",
            "rogue is not a chassis of this datapath's program",
        ],
    );
    assert!(line.contains("WARN"), "{line}");
    wait_log(
        &dir,
        "hv1",
        &[
            "closing the session with chassis rogue",
            &rogue_addr.to_string(),
        ],
    );
    // (a') hv2's own certificate with a hello that claims to be hv1.
    let (mut liar, _) = tls_connect(pki.client("hv2"), hv1);
    liar.write_all(&hello("hv1")).unwrap();
    read_to_end(&mut liar);
    wait_log(
        &dir,
        "hv1",
        &[
            "refused",
            "it says it is chassis hv1 but its certificate names hv2",
        ],
    );

    // (b) A TLS client without a certificate: the handshake fails, hv1 names the address.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let anon = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
        .with_no_client_auth();
    let (mut anon, anon_addr) = tls_connect(Arc::new(anon), hv1);
    let _ = anon.write_all(&hello("hv2"));
    assert!(
        read_to_end(&mut anon).is_empty(),
        "a client without a certificate got an answer"
    );
    let line = wait_log(
        &dir,
        "hv1",
        &[&format!("refused {anon_addr}"), "no certificates"],
    );
    assert!(line.contains("WARN"), "{line}");

    // (c) Plain TCP on the pssl: port: refused before anything is read.
    let mut plain = TcpStream::connect(hv1).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let plain_addr = plain.local_addr().unwrap();
    let _ = plain.write_all(&hello("hv2"));
    assert!(
        read_to_end(&mut plain).is_empty(),
        "a plain TCP client got an answer"
    );
    wait_log(&dir, "hv1", &[&format!("refused {plain_addr}"), "not TLS"]);

    // Both daemons run on; the session between them is the one it was, and the strangers'
    // are gone.
    alive(&dir, "hv1");
    alive(&dir, "hv2");
    let after = wait_for(
        || appctl(&dir, "hv1", &["datapath/state-sessions"]),
        |o| o.lines().filter(|l| l.starts_with("chassis=")).count() == 1,
        "hv1's refused sessions to go",
    );
    let s = sessions(&dir, "hv1");
    assert_eq!(s[0]["chassis"], "hv2", "{after}");
    assert_eq!(s[0]["address"], s1["address"], "{after}");
    assert_eq!(s[0]["state"], "up", "{after}");
    let s = sessions(&dir, "hv2");
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0]["address"], s2["address"], "{s:?}");
    assert_eq!(s[0]["state"], "up", "{s:?}");
    let m = migration(&dir, "hv2", "in", |_| true);
    assert_eq!(m["outcome"], "completed", "{m:?}");
}

#[test]
fn state_channel_over_plain_tcp_and_without_a_listener() {
    if !common::require(
        "state_channel_over_plain_tcp_and_without_a_listener",
        &["ovs-appctl"],
    ) {
        return;
    }
    let mut d = Daemons {
        dir: tempfile::tempdir().unwrap(),
        pidfiles: Vec::new(),
    };
    let dir = d.dir.path().to_path_buf();
    let state = free_tcp_port();
    let (s1, _) = migrate_vm1(
        &mut d,
        |_| vec![format!("--state-listen=ptcp:{state}")],
        "no",
    );
    assert_eq!(s1["cert"], "-", "{s1:?}");
    // A stranger's hello on plain TCP: refused, named, closed.
    let mut stranger = TcpStream::connect((IPS[0], state)).unwrap();
    stranger
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stranger.write_all(&hello("hv9")).unwrap();
    let got = read_to_end(&mut stranger);
    assert_eq!(got.len(), 1, "{got:?}");
    wait_log(
        &dir,
        "hv1",
        &[
            "state channel from",
            "hv9 is not a chassis of this datapath's program",
        ],
    );
    // Bytes that are no state frame at all.
    let mut junk = TcpStream::connect((IPS[0], state)).unwrap();
    junk.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    junk.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).unwrap();
    read_to_end(&mut junk);
    wait_log(&dir, "hv1", &["refused", "bad state frame"]);
    // A frame that claims 1 MiB and never ends, from a peer that said no hello: cut at 64 KiB
    // (the core would buffer up to its frame limit).
    let mut big = TcpStream::connect((IPS[0], state)).unwrap();
    big.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let big_addr = big.local_addr().unwrap();
    let mut frame = vec![0u8, 0x10, 0, 0];
    frame.resize(96 << 10, 0);
    let _ = big.write_all(&frame);
    read_to_end(&mut big);
    wait_log(
        &dir,
        "hv1",
        &[
            &format!("closing the session with {big_addr}"),
            "bytes and no hello",
        ],
    );
    alive(&dir, "hv1");
    wait_for(
        || sessions(&dir, "hv1").len().to_string(),
        |n| n == "1",
        "hv1's refused sessions to go",
    );

    // Both stop; hv2 comes back without --state-listen: the dial its migration asks for fails
    // with the reason, and nothing listens.
    for hv in ["hv2", "hv1"] {
        appctl(&dir, hv, &["exit"]);
        let pidfile = dir.join(format!("{hv}.pid"));
        wait_for(
            || pidfile.exists().to_string(),
            |e| e == "false",
            &format!("{hv} to exit"),
        );
        d.pidfiles.retain(|p| *p != pidfile);
    }
    let out = spawn(
        &mut d,
        2,
        free_port(),
        &["vm1,02:00:00:00:00:01", "vm2,02:00:00:00:00:02"],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    install(&dir, "hv2", destination_program());
    wait_log(
        &dir,
        "hv2",
        &[
            "state channel to chassis hv1",
            "no --state-listen: the state channel is off",
        ],
    );
    assert_eq!(
        appctl(&dir, "hv2", &["datapath/state-sessions"]),
        "no --state-listen: the state channel is off\n"
    );
    let m = migration(&dir, "hv2", "in", |_| true);
    assert_eq!(m["outcome"], "running", "{m:?}");
    assert_eq!(m["precopy"], "0", "{m:?}");
    // pssl: without -p/-c/-C does not start, and says which flags are missing.
    let out = spawn(
        &mut d,
        1,
        free_port(),
        &["vm1"],
        &[
            format!("--state-listen=pssl:{state}"),
            "-c".into(),
            dir.join("nosuch.pem").display().to_string(),
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--private-key") && err.contains("--ca-cert") && err.contains("pssl:"),
        "{err}"
    );
}

//! [`Central`]: real OVN's central daemons in a temporary directory.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::{Daemon, NB_SCHEMA, OvsdbServer, SB_SCHEMA};
use crate::cmd::{self, DEFAULT_TIMEOUT};
use crate::{KitError, Result};

/// NB and SB `ovsdb-server`s (OVN 23.03's schemas, `nb.db`/`sb.db`, remotes
/// `unix:DIR/nb.sock`/`sb.sock`) and `ovn-northd` between them, in a temporary directory.
/// Everything is stopped (northd first) and removed on drop.
#[derive(Debug)]
pub struct Central {
    /// The NB remote (`unix:...`).
    pub nb: String,
    /// The SB remote (`unix:...`).
    pub sb: String,
    // Dropped in this order: northd, the servers, then the directory.
    northd: Option<Daemon>,
    sb_server: OvsdbServer,
    nb_server: OvsdbServer,
    dir: tempfile::TempDir,
}

impl Central {
    /// Empty NB and SB databases and `ovn-northd` compiling one into the other.
    pub fn start() -> Result<Central> {
        let mut c = Central::databases()?;
        c.start_northd()?;
        Ok(c)
    }

    /// Empty NB and SB databases, without northd ([`Central::start_northd`] starts it):
    /// for a test that fills the SB first (chassis) or runs its own northd.
    pub fn databases() -> Result<Central> {
        let dir = tempdir()?;
        let nb_server = OvsdbServer::create(dir.path(), "nb", Path::new(NB_SCHEMA))?;
        let sb_server = OvsdbServer::create(dir.path(), "sb", Path::new(SB_SCHEMA))?;
        Ok(Central::assemble(dir, nb_server, sb_server))
    }

    /// Serve copies of existing NB and SB database files (an earlier run's), without northd.
    pub fn from_files(nb: &Path, sb: &Path) -> Result<Central> {
        let dir = tempdir()?;
        let mut servers = Vec::new();
        for (name, src) in [("nb", nb), ("sb", sb)] {
            let file = dir.path().join(format!("{name}.db"));
            std::fs::copy(src, &file).map_err(|e| {
                KitError::io(
                    format!("copying {} to {}", src.display(), file.display()),
                    e,
                )
            })?;
            servers.push(OvsdbServer::serve(dir.path(), name, &[file], &[])?);
        }
        let sb_server = servers
            .pop()
            .ok_or_else(|| KitError::Invalid("no SB".into()))?;
        let nb_server = servers
            .pop()
            .ok_or_else(|| KitError::Invalid("no NB".into()))?;
        Ok(Central::assemble(dir, nb_server, sb_server))
    }

    fn assemble(dir: tempfile::TempDir, nb_server: OvsdbServer, sb_server: OvsdbServer) -> Self {
        Central {
            nb: nb_server.remote.clone(),
            sb: sb_server.remote.clone(),
            northd: None,
            sb_server,
            nb_server,
            dir,
        }
    }

    /// Start `ovn-northd` (daemon `northd`) on the two databases.
    pub fn start_northd(&mut self) -> Result<()> {
        let mut c = Command::new("ovn-northd");
        c.arg(format!("--ovnnb-db={}", self.nb))
            .arg(format!("--ovnsb-db={}", self.sb));
        self.northd = Some(Daemon::start(self.dir.path(), "northd", c)?);
        Ok(())
    }

    /// Stop `ovn-northd` and wait for it to exit (the SB stays as it wrote it).
    pub fn stop_northd(&mut self) -> Result<()> {
        match self.northd.take() {
            Some(d) => d.stop(),
            None => Ok(()),
        }
    }

    /// `ovn-northd`, while it runs.
    pub fn northd(&self) -> Option<&Daemon> {
        self.northd.as_ref()
    }

    /// The NB and SB servers.
    pub fn servers(&self) -> [&OvsdbServer; 2] {
        [&self.nb_server, &self.sb_server]
    }

    /// The directory: the databases, the sockets, the daemons' logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `DIR/NAME`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `ovn-nbctl --db=NB ARGS...`; its stdout.
    pub fn nbctl(&self, args: &[&str]) -> Result<String> {
        cmd::run(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", self.nb))
                .args(args),
            DEFAULT_TIMEOUT,
        )
    }

    /// `ovn-sbctl --db=SB ARGS...`; its stdout.
    pub fn sbctl(&self, args: &[&str]) -> Result<String> {
        cmd::run(
            Command::new("ovn-sbctl")
                .arg(format!("--db={}", self.sb))
                .args(args),
            DEFAULT_TIMEOUT,
        )
    }

    /// Wait (up to 60 s) until northd has processed every NB change (`ovn-nbctl --wait=sb
    /// sync`).
    pub fn sync(&self) -> Result<()> {
        cmd::run(
            Command::new("ovn-nbctl")
                .arg(format!("--db={}", self.nb))
                .args(["--timeout=60", "--wait=sb", "sync"]),
            Duration::from_secs(90),
        )
        .map(drop)
    }

    /// One `ovsdb-client transact` on database `db` (`OVN_Northbound`, `OVN_Southbound`) of
    /// the server at `remote`: the reply array; an error when any operation failed.
    pub fn transact(remote: &str, db: &str, ops: &[Value]) -> Result<Value> {
        let mut params = vec![Value::from(db)];
        params.extend(ops.iter().cloned());
        let out = cmd::run(
            Command::new("ovsdb-client")
                .arg("transact")
                .arg(remote)
                .arg(Value::Array(params).to_string()),
            DEFAULT_TIMEOUT,
        )?;
        let reply: Value = serde_json::from_str(&out).map_err(|e| KitError::Parse {
            what: "ovsdb-client transact's reply".into(),
            detail: format!("{e}: {out}"),
        })?;
        let failed = reply.as_array().is_none_or(|r| {
            r.iter()
                .any(|o| o.get("error").is_some_and(|e| !e.is_null()))
        });
        if failed {
            return Err(KitError::Command {
                cmd: format!("ovsdb-client transact {remote} {db}"),
                status: "an operation failed".into(),
                stderr: reply.to_string(),
                stdout: String::new(),
            });
        }
        Ok(reply)
    }

    /// The SB as its server holds it now, as one standalone database file (`ovsdb-client
    /// backup`: the schema and one compacted record). Call after [`Central::sync`].
    pub fn sb_backup(&self) -> Result<Vec<u8>> {
        let mut c = Command::new("ovsdb-client");
        c.args(["backup", &self.sb, "OVN_Southbound"]);
        let out = cmd::output(&mut c, None, DEFAULT_TIMEOUT)?;
        Ok(cmd::check(&c, out)?.stdout)
    }
}

fn tempdir() -> Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("hf-ovn-")
        .tempdir()
        .map_err(|e| KitError::io("creating a temporary directory", e))
}

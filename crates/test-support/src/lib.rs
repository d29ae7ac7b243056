//! Real servers for tests: a throwaway PostgreSQL or Redis on loopback, started from the
//! binaries on the machine and stopped when the handle drops.
//!
//! No containers (none run here) and no mocks: tests talk to the real thing. When a binary is
//! missing the start fails with a message saying what to install, never with a skipped test.
//!
//! PostgreSQL refuses to run as root, and CI runs as root: the data folder is then handed to the
//! `postgres` user and the server started through `runuser`.

pub mod http;
#[cfg(feature = "model")]
pub mod model;
pub mod smtp;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn find_binary(name: &str, extra_dirs: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra_dirs.iter().map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

fn is_root() -> bool {
    // The effective uid is in /proc/self/status ("Uid: real effective saved fs").
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn run(command: &mut Command, what: &str) {
    let output = command.output().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn wait_for_port(port: u16, what: &str) {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} did not listen on 127.0.0.1:{port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

const PG_DIRS: &[&str] =
    &["/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin"];

/// Whether the PostgreSQL server binaries (`initdb`) are installed, for programs that may do
/// without them (benchmarks); tests use [`PgServer::start`], which fails with what to install.
pub fn postgres_available() -> bool {
    find_binary("initdb", PG_DIRS).is_some()
}

/// A PostgreSQL server in a temp folder, stopped on drop.
#[derive(Debug)]
pub struct PgServer {
    dir: tempfile::TempDir,
    port: u16,
    pg_ctl: PathBuf,
    as_postgres: bool,
    options: String,
}

impl PgServer {
    /// Starts a server on a free loopback port with trust auth for the user `toolhost`.
    ///
    /// # Panics
    ///
    /// When `initdb`/`pg_ctl` are missing (install `postgresql`) or the server does not start.
    pub fn start() -> Self {
        let initdb =
            find_binary("initdb", PG_DIRS).expect("initdb not found: install the postgresql package");
        let pg_ctl =
            find_binary("pg_ctl", PG_DIRS).expect("pg_ctl not found: install the postgresql package");
        let dir = tempfile::Builder::new().prefix("toolhost-pg-").tempdir().expect("a temp dir");
        let as_postgres = is_root();
        if as_postgres {
            run(
                Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()),
                "chown of the data folder",
            );
        }
        let data = dir.path().join("data");
        let mut init = Self::command(as_postgres, &initdb);
        init.arg("-D").arg(&data).args(["-A", "trust", "-U", "toolhost", "--no-sync", "-E", "UTF8"]);
        run(&mut init, "initdb");
        let port = free_port();
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
            dir.path().display()
        );
        let server = Self { dir, port, pg_ctl, as_postgres, options };
        server.start_again();
        server
    }

    /// Stops the server as `pg_ctl stop -m MODE` does (`fast`: clients disconnected, a clean
    /// shutdown; `immediate`: no shutdown at all, recovery at the next start), keeping its data.
    ///
    /// # Panics
    ///
    /// When `pg_ctl` fails.
    pub fn stop(&self, mode: &str) {
        let mut stop = Self::command(self.as_postgres, &self.pg_ctl);
        stop.arg("-D").arg(self.dir.path().join("data")).args(["-m", mode, "-w", "stop"]);
        run(&mut stop, "pg_ctl stop");
    }

    /// Starts the server (again) on its port and data.
    ///
    /// # Panics
    ///
    /// When `pg_ctl` fails or the server does not listen within 30 s.
    pub fn start_again(&self) {
        let mut start = Self::command(self.as_postgres, &self.pg_ctl);
        start
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-o")
            .arg(&self.options)
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .args(["-w", "start"]);
        run(&mut start, "pg_ctl start");
        wait_for_port(self.port, "postgres");
    }

    fn command(as_postgres: bool, binary: &Path) -> Command {
        if as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(binary);
            command
        } else {
            Command::new(binary)
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL for a fresh database of this name (created on first call).
    ///
    /// # Panics
    ///
    /// When `createdb` fails.
    pub fn database_url(&self, name: &str) -> String {
        let createdb =
            find_binary("createdb", PG_DIRS).expect("createdb not found: install the postgresql package");
        let mut create = Command::new(createdb);
        create.args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "toolhost", name]);
        run(&mut create, "createdb");
        format!("postgres://toolhost@127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let mut stop = Self::command(self.as_postgres, &self.pg_ctl);
        stop.arg("-D").arg(self.dir.path().join("data")).args(["-m", "immediate", "stop"]);
        let _ = stop.stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

/// A Redis server in a temp folder, stopped on drop.
#[derive(Debug)]
pub struct RedisServer {
    dir: tempfile::TempDir,
    port: u16,
    child: std::sync::Mutex<Option<std::process::Child>>,
}

impl RedisServer {
    /// Starts `redis-server` on a free loopback port, without persistence.
    ///
    /// # Panics
    ///
    /// When `redis-server` is missing (install `redis-server`) or does not start.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new().prefix("toolhost-redis-").tempdir().expect("a temp dir");
        let server = Self { dir, port: free_port(), child: std::sync::Mutex::new(None) };
        server.start_again();
        server
    }

    /// Stops the server (it is killed; what it held is gone).
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server (again) on its port.
    ///
    /// # Panics
    ///
    /// When `redis-server` is missing or does not listen within 30 s.
    pub fn start_again(&self) {
        let binary =
            find_binary("redis-server", &[]).expect("redis-server not found: apt-get install redis-server");
        let child = Command::new(binary)
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        *self.child.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(child);
        wait_for_port(self.port, "redis-server");
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The folder of the pinned third-party tools the interop tests run (`.ci/interop-tools.sh`
/// installs them; `cargo xtask test` runs it first and names the folder in
/// `TOOLHOST_INTEROP_DIR`; default `target/interop` of this workspace).
///
/// # Panics
///
/// When the tools are not installed, saying how to install them.
pub fn interop_dir() -> PathBuf {
    let dir = std::env::var_os("TOOLHOST_INTEROP_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/interop"), PathBuf::from);
    assert!(
        dir.join("venv/bin/python").exists() && dir.join("node/node_modules").exists(),
        "the interop tools are not installed in {}: run `bash .ci/interop-tools.sh` (cargo xtask test does)",
        dir.display()
    );
    dir
}

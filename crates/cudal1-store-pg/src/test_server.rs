//! A throwaway PostgreSQL server for tests: `initdb` into a temporary directory, `pg_ctl start` on
//! a free port, stopped and removed when dropped. The binaries come from `CUDAL1_PG_BIN`, `PATH`,
//! or Debian's `/usr/lib/postgresql/<version>/bin` (`.ci/run` installs the `postgresql` package).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A running server; stopped (immediate mode) and deleted on drop.
pub struct TestPostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    pub port: u16,
}

/// Where the server binaries are, if anywhere.
pub fn find_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("CUDAL1_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>());
    let debian = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"));
    let mut debian: Vec<PathBuf> = debian.collect();
    // The newest version first.
    debian.sort_by_key(|p| {
        std::cmp::Reverse(
            p.parent()
                .and_then(|v| v.file_name())
                .and_then(|v| v.to_str())
                .and_then(|v| v.parse::<u32>().ok()),
        )
    });
    on_path.chain(debian).find(|d| {
        d.join("initdb").is_file() && d.join("pg_ctl").is_file() && d.join("postgres").is_file()
    })
}

/// Runs a command, with its output in the error.
fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

impl TestPostgres {
    /// Starts a fresh server, or `None` (with the reason) when the binaries are absent.
    ///
    /// # Panics
    /// When the binaries exist but the server cannot be made or started: a broken setup must
    /// fail the test, not skip it.
    pub fn start() -> Result<TestPostgres, String> {
        let Some(bin) = find_bin() else {
            return Err("PostgreSQL's server binaries (initdb, pg_ctl, postgres) were not found: install Debian's `postgresql` package or set CUDAL1_PG_BIN".into());
        };
        let dir =
            tempfile::Builder::new().prefix("cudal1-pg-").tempdir().expect("a temporary directory");
        let data = dir.path().join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args(["-A", "trust", "-U", "cudal1", "--no-sync", "-E", "UTF8", "--locale", "C", "-D"])
            .arg(&data);
        as_postgres_user(&mut initdb, dir.path());
        run(&mut initdb).unwrap_or_else(|e| panic!("initdb: {e}"));
        let port = free_port();
        let server = TestPostgres { bin, dir, port };
        server.pg_ctl_start();
        server.stop_when_this_process_ends();
        Ok(server)
    }

    /// A server kept in a `static` is never dropped: a watcher stops it (immediate shutdown) and
    /// removes its directory once the test process is gone, so that no server outlives its tests.
    fn stop_when_this_process_ends(&self) {
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; \
             p=$(head -n 1 '{data}/postmaster.pid' 2>/dev/null) && kill -QUIT \"$p\" 2>/dev/null; sleep 2; rm -rf '{dir}'",
            pid = std::process::id(),
            data = self.data_dir().display(),
            dir = self.dir.path().display(),
        );
        // No inherited output: the test harness must not wait on the watcher's pipes.
        let _ = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
    }

    pub fn url(&self) -> String {
        format!("postgres://cudal1@127.0.0.1:{}/postgres", self.port)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_ctl_start(&self) {
        // Shared memory segments in the data directory (mmap), not in /dev/shm: a server a test
        // kills would leave them there, in RAM, after the test is gone.
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 -c dynamic_shared_memory_type=mmap",
            self.port,
            self.dir.path().display()
        );
        let mut cmd = Command::new(self.bin.join("pg_ctl"));
        cmd.arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .args(["-w", "-t", "60", "-o", &opts, "start"]);
        as_postgres_user(&mut cmd, self.dir.path());
        run(&mut cmd).unwrap_or_else(|e| panic!("pg_ctl start: {e}\nlog:\n{}", self.log()));
    }

    /// Stops the server (fast mode: sessions are cut) and starts it again on the same port.
    pub fn restart(&self) {
        self.stop();
        self.pg_ctl_start();
    }

    /// Stops the server; [`TestPostgres::start_again`] brings it back.
    pub fn stop(&self) {
        let mut cmd = Command::new(self.bin.join("pg_ctl"));
        cmd.arg("-D").arg(self.data_dir()).args(["-w", "-m", "fast", "stop"]);
        as_postgres_user(&mut cmd, self.dir.path());
        run(&mut cmd).unwrap_or_else(|e| panic!("pg_ctl stop: {e}"));
    }

    pub fn start_again(&self) {
        self.pg_ctl_start();
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// Waits until a connection succeeds.
    pub fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "PostgreSQL did not accept connections in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        let mut cmd = Command::new(self.bin.join("pg_ctl"));
        cmd.arg("-D").arg(self.data_dir()).args(["-m", "immediate", "stop"]);
        as_postgres_user(&mut cmd, self.dir.path());
        let _ = cmd.stdout(Stdio::null()).stderr(Stdio::null()).status();
    }
}

/// PostgreSQL refuses to run as root: as root, run its commands as `nobody` (which then owns the
/// temporary directory).
fn as_postgres_user(cmd: &mut Command, dir: &Path) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let nobody = 65534;
    chown_tree(dir, nobody);
    use std::os::unix::process::CommandExt;
    cmd.uid(nobody).gid(nobody);
}

fn chown_tree(dir: &Path, id: u32) {
    let _ = std::os::unix::fs::chown(dir, Some(id), Some(id));
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() && !path.is_symlink() {
            chown_tree(&path, id);
        } else {
            let _ = std::os::unix::fs::lchown(&path, Some(id), Some(id));
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
